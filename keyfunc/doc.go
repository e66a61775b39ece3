// Package keyfunc provides the key functions that say whose budget a request
// spends: the client IP (behind trusted proxies), a hashed API key, a tenant,
// an operator, a subscriber, combinations of them, and a constant. Every one
// is a [core.KeyFunc]; it reads only the router-neutral [core.Request], so
// the same key function works with every adapter.
//
// A wrong key is either a security hole (a spoofed header buys unlimited
// requests) or an outage (an office behind one NAT shares one budget); the
// defaults below lean towards the first never happening.
//
// # Client IP
//
// [IP] with a zero [IPConfig] (or [PeerIP]) keys a request by its peer
// address, core.Request.RemoteAddr, the socket address the adapter reports,
// and ignores every header. Behind a reverse proxy or a CDN every request
// would then share the proxy's budget, so name the proxies and the header
// they set:
//
//	ipKey, err := keyfunc.IP(keyfunc.IPConfig{
//		TrustedProxies: []string{"10.0.0.0/8"},
//		Headers:        []keyfunc.Source{keyfunc.XForwardedFor},
//	})
//
// Headers are read only when the peer lies inside TrustedProxies; a client
// that connects directly is keyed by its own address whatever it sends. The
// first header of Headers that the request carries decides:
//
//   - [XForwardedFor]: all field lines merged in order, walked from the right,
//     skipping trusted proxies; the first other address is the client.
//     Entries a client prepended are never reached, not even parsed: the
//     walk costs the trusted hops at the right end, however long the
//     header (a 10,000-entry header costs what a three-entry one does).
//   - [Forwarded] (RFC 7239): the for= node of every element, walked the same
//     way. Quoted, bracketed IPv6 nodes with ports are understood; "unknown"
//     and obfuscated ("_hidden") nodes are unparsable. Each field line is
//     parsed on its own. Only the elements walked are parsed; a line with
//     a quoted string is first scanned once for where its elements end,
//     since a comma inside quotes does not end one.
//   - [XRealIP] and [ClientIPHeader] ("CF-Connecting-IP", "True-Client-IP"):
//     one address, the last field line when there are several.
//
// When every entry is a trusted proxy, the left-most entry is the client
// (the request came from inside the trusted network).
//
// Addresses are normalised with net/netip before they are compared with the
// trusted prefixes and before they become keys: IPv4-mapped IPv6 addresses
// ("::ffff:10.0.0.1") are unmapped and zones dropped, so a trusted proxy
// cannot be aliased. IPv4 clients are keyed by their address ("192.0.2.1"),
// IPv6 clients by their /64 prefix ("2001:db8:1:2::/64"; IPConfig.IPv6Prefix
// sets /32 to /128), because SLAAC and privacy addresses rotate freely within
// a subscriber's prefix. To limit both a /64 and single addresses, use two
// budgets. An IPv6 address that carries an IPv4 client keys as that IPv4
// ("203.0.113.5"): NAT64/SIIT under 64:ff9b::/96 or a prefix of
// IPConfig.NAT64Prefixes, Teredo and 6to4, so the IPv4 clients behind one
// translator never share one budget.
//
// A CIDR that does not parse is a construction error; nothing in this
// package panics while serving a request, whatever the request holds.
//
// # Malformed forwarding headers
//
// Two rules pull apart here. Falling back to the peer address keeps the
// request flowing, but the peer is the proxy: every request arriving with a
// broken header then shares the proxy's budget, and if that address is
// privileged anywhere (an allow-list, a larger quota for internal callers),
// a broken header becomes a way to borrow its privileges. This is how, in
// CasaOS (CVE-2023-37265), "X-Forwarded-For: x" became 127.0.0.1. Failing
// closed returns no address and lets the budget decide, explicitly.
//
// The default, [MalformedReject], fails closed: when an entry the walk must cross
// (one to the right of the client, that is, written by a trusted proxy)
// cannot be parsed, the key function returns an error wrapping [ErrMalformed]
// and [core.ErrNoKey]. Garbage a client sends to the left of the entry its
// proxy appended is never walked and never matters. What then happens is the
// budget's MissingKey action: deny the request, or key it with FallbackKey,
// for example a [Constant] shared by every unparsable request:
//
//	core.Budget{Name: "per_ip", Key: ipKey,
//		MissingKey: core.MissingKeyFallback, FallbackKey: keyfunc.Constant("unparsable-client")}
//
// [MalformedUsePeer] (IPConfig.OnMalformed) keys such requests by the peer address
// instead, for deployments whose proxies are not privileged anywhere and
// that prefer one shared budget per proxy. Since a trusted proxy writes the
// walked entries, either outcome signals a proxy misconfiguration, and the
// key function's error, reported to the engine's observer, says which
// header was at fault without quoting it.
//
// # API keys
//
// [APIKey] reads a credential from the Authorization header with a named
// scheme ("Bearer", "AccessKey"), from a header such as X-API-Key, from a
// query parameter, or from a function, and hashes it with a [Hasher]:
// HMAC-SHA-256 under an application secret, truncated and hex- or
// base64-encoded. The raw credential never appears in a key, an error or
// anything derived from them. Requests with two Authorization lines, two
// api-key headers or two api-key parameters are refused as malformed: the
// authenticating middleware might read the other one.
//
// APIKeyConfig.Query reads the parameter from core.Request.RawQuery, which
// every adapter fills; APIKeyConfig.RawQuery can supply the query string
// from elsewhere.
//
// [Hashed] applies a Hasher to any key function, for identities that must
// not appear in stores or logs.
//
// # Tenant, operator, subscriber
//
// [Tenant], [Operator] and [Subscriber] read the identity the application's
// authentication middleware stored in the request (a context value, a Gin
// key, an Echo value, a Fiber local: whatever core.Request.Value exposes);
// [TenantFunc], [OperatorFunc] and [SubscriberFunc] call a function instead.
// [Value] and [Func] are the general forms. Identities longer than
// MaxValueLen are refused.
//
// # Combining keys
//
// [Composite] keys by a tuple, e.g. (tenant, operator), escaping its parts so
// that different tuples never share a key. [Constant] and [Global] give every
// request one key. [FirstOf] takes the first alternative that has a key, e.g.
// the tenant when the request is authenticated, else the client IP; it
// prefixes the key with the alternative's position, so a tenant can never
// share a budget with an address.
//
// # Missing keys
//
// Every key function here returns an error wrapping [core.ErrNoKey] when it
// has no key for a request: no credential, no tenant, no parsable client
// address. It never returns an empty key instead. What a budget then does is
// its core.Budget.MissingKey:
//
//   - core.MissingKeyDeny (the default) refuses the request before
//     anything is charged: 401 with WWW-Authenticate when the missing key
//     is a credential ([APIKey]), 400 otherwise (see core.DefaultDeny).
//     Right for budgets that only authenticated requests reach.
//   - core.MissingKeySkip leaves the budget out of the decision. Use it only
//     when another budget limits those requests, e.g. a per-tenant budget
//     next to a per-IP budget on the same route.
//   - core.MissingKeyFallback keys the request with Budget.FallbackKey:
//     keyfunc.Constant("anonymous") for one shared bucket, or an IP key.
//
// A credential that is present but malformed or ambiguous (two
// Authorization lines, an empty key) gets an error wrapping
// [ErrBadCredential] instead, which does not wrap core.ErrNoKey: the budget
// denies the request whatever its MissingKey, and FirstOf does not move on,
// so a client cannot leave its key's budget by sending a second credential.
//
// FirstOf and MissingKeyFallback both express "tenant, else IP"; both keep
// the alternatives' keys apart (FirstOf tags them by position, core
// prefixes fallback keys). FirstOf leaves MissingKey free to handle the
// case where no alternative has a key.
//
// Errors never contain request data, so they can be logged; the errors for
// missing and malformed keys are allocated once, so a flood of requests
// without keys costs no allocation.
package keyfunc
