// Package sendapi is the policy of the Send API example: a messaging API
// whose rate-limit contract quotagate reproduces exactly, served by four
// commands that differ only in their router:
//
//	go run ./examples/sendapi/nethttp   # net/http
//	go run ./examples/sendapi/gin       # Gin
//	go run ./examples/sendapi/echo      # Echo v4
//	go run ./examples/sendapi/fiber     # Fiber v2
//
// Each takes -addr (default 127.0.0.1:8080) and -redis (a Redis server's
// host:port, a redis:// or rediss:// URL with password, TLS and database,
// or a Redis Cluster's nodes, comma-separated; empty means the memory
// store; -h lists the forms), prints "listening on HOST:PORT" once it accepts
// connections, and exits 0 on SIGINT or SIGTERM.
//
// # The contract
//
// Requests authenticate with "Authorization: AccessKey <key>". Routes are
// grouped, and every group is one budget counted in one-minute fixed
// windows aligned to the minute:
//
//   - email_send (POST /v1/email/messages) and sms_send
//     (POST /v1/sms/messages) are shared by every credential of an
//     organisation; their quota is the group's base plus the increase of
//     the organisation's plan, or the organisation's override, which
//     replaces both.
//   - management (GET /v1/messages/{id}, GET and POST /v1/webhooks,
//     DELETE /v1/webhooks/{id}) is counted per acting credential.
//   - auth (POST /v1/auth/login, POST /v1/auth/password-reset) is
//     unauthenticated and counted per client IP, a fixed 10.
//
// A batch send counts as one request, whatever its number of recipients.
// Every response of a limited route carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers); a denial is 429 with Retry-After
// and a typed JSON error. Sends accept an Idempotency-Key: a completed key
// replays its first response, and a rate-limited request never records its
// key. When the Redis store fails, requests pass (fail-open) and the error
// is logged.
//
// # Layout
//
// This package holds everything the four commands share: the
// configuration ([LoadConfig]), the credentials and their organisations,
// the budgets and their quota resolution ([New] builds the engine and one
// [core.Layer] per group), the denial body ([Deny]), the idempotency store
// ([IdempotencyStore], in memory or in Redis), the router-neutral handlers
// (methods of [App] returning a [Response]) and the process life cycle
// ([Main]). A command only maps routes to handlers and attaches, per
// route, the authentication middleware and the group's quotagate layer.
package sendapi
