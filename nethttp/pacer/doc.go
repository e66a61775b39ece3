// Package pacer is the client side of rate limiting: an [http.RoundTripper]
// for clients of rate-limited APIs, quotagate's or anyone's.
//
//	client := &http.Client{Transport: pacer.MustNew(pacer.Config{})}
//
// A [Transport] retries 429 (and 503 with Retry-After) as the server says,
// retries network errors only when that is safe, and paces: it reads the
// RateLimit and RateLimit-Policy fields (and the older RateLimit-* and
// X-RateLimit-* ones) on every response and holds back the next request
// while the server's remaining quota is spent, so a well-behaved client
// meets few 429s. [Config].Layer adds a quotagate budget of the client's
// own, shared by several transports or processes ([OutgoingHost] keys it
// by API host). No request waits longer than [Config].MaxWait before an
// attempt, whatever other requests do, and no server is believed further
// ahead than [Config].MaxReset: when a block passes, one request asks the
// server again before the others go. When it gives up, a request fails
// with a [*RetryError] saying why.
//
// The server side, middleware for net/http handlers, is package nethttp.
package pacer
