package pacer

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Transport is an [http.RoundTripper] for clients of rate-limited APIs. It
// sends each request through a base transport and:
//
//   - retries 429 Too Many Requests, and 503 Service Unavailable when it
//     carries Retry-After; no other status is retried (not 501, not
//     another 4xx, not a 5xx without Retry-After), and those responses are
//     returned as they are;
//   - retries network errors only for idempotent methods (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE) and for requests that carry an
//     Idempotency-Key header; TLS certificate errors are never retried;
//   - waits as the server says: Retry-After first (delay-seconds, with a
//     fraction tolerated, or an HTTP-date in any RFC 9110 form), then the
//     t of an exhausted policy in the response's RateLimit field, and
//     otherwise an exponential backoff with full jitter,
//     U(0, min(BackoffCap, BackoffBase·2^n, MaxWait)) before retry n+1;
//   - makes at most MaxAttempts attempts (default 4), each with the same
//     method, URL, headers, body bytes and Idempotency-Key;
//   - paces: it reads RateLimit and RateLimit-Policy (and the older
//     RateLimit-* and X-RateLimit-* fields) on every response and, before
//     each attempt, waits when a policy's remaining quota is spent, so
//     that no more than r requests go out before t (see Pacing below);
//   - optionally spends a quotagate budget of its own before each attempt
//     ([Config].Layer), which coordinates several transports or
//     processes that share one server budget.
//
// A request body is resent through [http.Request.GetBody], which
// [http.NewRequest] sets for bytes, strings and their readers. A request
// whose body cannot be replayed (a body without GetBody) is sent once: a
// 429 or a network error is then returned as a [*RetryError] wrapping
// [ErrBodyNotReplayable].
//
// Every wait ends as soon as the request's context is done, and a wait
// that would outlast the context's deadline is not started. When the
// transport gives up, RoundTrip returns a [*RetryError] saying how many
// attempts were made and how each failed; the response of the last attempt
// is closed.
//
// A Transport is safe for concurrent use; share one per process (or per
// set of workers sharing a budget) so its pacing sees every request.
//
// # Pacing
//
// The pacing state is kept per scope (the request's host, see
// [Config].PacingScope) and policy, and shared by every goroutine
// using the transport. An attempt starts only while, for every policy the
// scope's responses reported, the remaining quota r minus the attempts
// still in flight is positive; otherwise it waits for t, or for an answer
// from an attempt in flight. Of two overlapping answers the lower r is kept
// (the other may predate it); an answer to an attempt started after the
// current r was learned replaces it. When t passes, a policy whose quota q
// is known (from RateLimit-Policy, or a legacy Limit field) allows q more
// for one more window (w, or else the longest t seen); one whose quota is
// unknown stops constraining until the next answer. A 429 (or 503) with
// Retry-After and no rate-limit fields holds back the whole scope until
// then.
//
// No server is believed further ahead than MaxReset: a Retry-After or a
// reset beyond it is read as MaxReset, and a window longer than it is not
// renewed. When a Retry-After block passes, or such a reset or window
// does, one request of the scope asks the server again and the others
// wait for its answer (a request that gets none leaves the asking to the
// next), so that a server can always lift a block it asked for.
//
// What is read, and how:
//
//   - RateLimit and RateLimit-Policy per draft-ietf-httpapi-ratelimit-headers
//     (RFC 9651 lists, several policies, names as Strings or Tokens, a
//     partition key pk keeping partitions apart). A field that does not
//     parse is ignored; so is a list member without a valid r.
//   - RateLimit-Limit/-Remaining/-Reset and X-RateLimit-Limit/-Remaining/
//     -Reset, each family as one unnamed policy. Their reset is delta
//     seconds or a Unix timestamp, told apart by size: a value above half
//     the current Unix time in seconds (about 28 years in 2026) is a
//     timestamp in seconds, one above half the current Unix time in
//     milliseconds is a timestamp in milliseconds, anything smaller is
//     seconds (fractions are accepted).
//   - Nothing from a response served from a cache (one with a positive
//     Age): its fields describe the past.
//
// No request waits longer than MaxWait before an attempt, all the rounds
// of its wait summed, whatever other requests do: a reset further away
// ends it at once with ErrWaitTooLong, and one held back by attempts in
// flight (one that hangs, say) gives up with ErrWaitTooLong when MaxWait
// has passed. A transport tracks at most 4096 scopes of 16
// policies; beyond that, requests to new scopes go unpaced (their retries
// still honour Retry-After).
type Transport struct {
	base         http.RoundTripper
	maxAttempts  int
	backoffBase  time.Duration
	backoffCap   time.Duration
	maxWait      time.Duration
	maxTotalWait time.Duration
	maxReset     time.Duration
	scopeOf      func(*http.Request) string
	layer        *core.Layer
	addKey       bool
	pacing       *paceTable // nil when pacing is off
}

// Config configures a [Transport]. The zero value is usable.
type Config struct {
	// Base sends each attempt. Default http.DefaultTransport.
	Base http.RoundTripper

	// MaxAttempts is the most attempts per request, the first included.
	// Default 4; 1 disables retries.
	MaxAttempts int

	// BackoffBase and BackoffCap shape the backoff used when a retryable
	// response names no wait: before retry n+1 (n = 0, 1, ...) the
	// transport waits a uniformly random time in
	// [0, min(BackoffCap, BackoffBase·2^n, MaxWait)]. Defaults 1s and 30s.
	BackoffBase time.Duration
	BackoffCap  time.Duration

	// MaxWait is the longest the transport waits before any one attempt,
	// everything it waits for then summed: a Retry-After or backoff, a
	// reset it paces by, the answers of attempts in flight that hold the
	// server's last units (however many rounds that takes), a shared
	// budget's retry-after or shaping delay. A wait whose length is known
	// and would pass it ends the request at once with a *RetryError
	// wrapping ErrWaitTooLong; a wait for attempts in flight ends the
	// request so when MaxWait is reached. Default 2 minutes.
	MaxWait time.Duration

	// MaxTotalWait caps the time one request spends waiting, over all its
	// attempts; a wait that would pass it ends the request with
	// ErrTotalWaitExceeded. Zero means no cap beyond MaxWait per wait,
	// MaxAttempts and the request's context.
	MaxTotalWait time.Duration

	// MaxReset is the furthest ahead the transport believes a server: a
	// Retry-After or a reset (RateLimit t, or w without t; a legacy Reset)
	// further away is read as MaxReset, for the pacing state and for the
	// refused request's own wait (which MaxWait still bounds); when it
	// passes, one request asks the server again (see Pacing on
	// [Transport]). Default 5 minutes: beyond the per-second to per-minute
	// windows clients pace by, while a bogus value (milliseconds sent as
	// seconds, a nonsense number) stops a host's requests for minutes, not
	// for hours or for good, and a server that meant it is asked once per
	// MaxReset.
	MaxReset time.Duration

	// DisablePacing turns off pacing: the transport then only retries, and
	// reads rate-limit fields only to time the retry of a 429.
	DisablePacing bool

	// PacingScope names the budget a request draws on, as far as the
	// pacing state is concerned: policies reported by responses to
	// requests of one scope constrain every request of that scope.
	// Default: the request's host (with port), so that every policy a host
	// reports paces every request to it. An API whose endpoint groups have
	// separate budgets can return host plus group here.
	PacingScope func(*http.Request) string

	// Layer, when set, is decided before every attempt, as a client-side
	// limit with the same budget definitions as the server's (typically
	// one budget keyed by a constant or by [OutgoingHost]). Give several
	// transports layers of one engine, or engines on one Redis store, and
	// they share the budget: no worker can overspend what the others have
	// sent, which a response's RateLimit field cannot tell it. A denial is
	// waited out (its RetryAfter, bounded by MaxWait) and decided again; a
	// shaping delay is waited; an attempt the server then refuses with 429
	// is refunded. A concurrency budget (core.Concurrency) holds its slot
	// while an attempt is in flight, until its response's header arrives
	// (or it fails): "at most 8 calls in flight to this API". Key functions
	// can reach the outgoing request with [OutgoingRequest].
	Layer *core.Layer

	// AddIdempotencyKey gives every request with a non-idempotent method
	// (POST, PATCH, ...) that has no Idempotency-Key header a random one
	// (an RFC 9651 String of 32 hex digits), the same on every attempt, so
	// that network errors on it can be retried safely. The server must
	// honour Idempotency-Key for this to be safe.
	AddIdempotencyKey bool
}

// Defaults of Config.
const (
	DefaultMaxAttempts = 4
	DefaultBackoffBase = time.Second
	DefaultBackoffCap  = 30 * time.Second
	DefaultMaxWait     = 2 * time.Minute
	DefaultMaxReset    = 5 * time.Minute
)

// New returns a transport configured by cfg, or a
// *core.ConfigError listing every problem found.
func New(cfg Config) (*Transport, error) {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("transport: "+format, args...))
	}
	if cfg.MaxAttempts < 0 {
		bad("max attempts %d is negative", cfg.MaxAttempts)
	}
	if cfg.BackoffBase < 0 {
		bad("backoff base %v is negative", cfg.BackoffBase)
	}
	if cfg.BackoffCap < 0 {
		bad("backoff cap %v is negative", cfg.BackoffCap)
	}
	if cfg.MaxWait < 0 {
		bad("max wait %v is negative", cfg.MaxWait)
	}
	if cfg.MaxTotalWait < 0 {
		bad("max total wait %v is negative", cfg.MaxTotalWait)
	}
	if cfg.MaxReset < 0 {
		bad("max reset %v is negative", cfg.MaxReset)
	}
	t := &Transport{
		base:         cfg.Base,
		maxAttempts:  cmp0(cfg.MaxAttempts, DefaultMaxAttempts),
		backoffBase:  cmp0(cfg.BackoffBase, DefaultBackoffBase),
		backoffCap:   cmp0(cfg.BackoffCap, DefaultBackoffCap),
		maxWait:      cmp0(cfg.MaxWait, DefaultMaxWait),
		maxTotalWait: cfg.MaxTotalWait,
		maxReset:     cmp0(cfg.MaxReset, DefaultMaxReset),
		scopeOf:      cfg.PacingScope,
		layer:        cfg.Layer,
		addKey:       cfg.AddIdempotencyKey,
	}
	if t.backoffCap < t.backoffBase {
		bad("backoff cap %v is below the backoff base %v", t.backoffCap, t.backoffBase)
	}
	if len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.scopeOf == nil {
		t.scopeOf = func(r *http.Request) string { return r.URL.Host }
	}
	if !cfg.DisablePacing {
		t.pacing = newPaceTable(t.maxReset)
	}
	return t, nil
}

// MustNew is New for configurations known to be valid; it
// panics on error.
func MustNew(cfg Config) *Transport {
	t, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return t
}

func cmp0[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has any.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Errors a *RetryError wraps to say why the transport gave up.
var (
	// ErrAttemptsExhausted: every attempt allowed by MaxAttempts failed.
	ErrAttemptsExhausted = errors.New("quotagate: attempts exhausted")
	// ErrWaitTooLong: the wait before an attempt would pass MaxWait: the
	// server (or the shared budget) asked for a longer one, or attempts in
	// flight held the server's last units that long.
	ErrWaitTooLong = errors.New("quotagate: the requested wait exceeds the maximum")
	// ErrTotalWaitExceeded: the next wait would pass MaxTotalWait.
	ErrTotalWaitExceeded = errors.New("quotagate: the total wait would exceed its cap")
	// ErrWaitPastDeadline: the next wait would outlast the request
	// context's deadline. It wraps context.DeadlineExceeded.
	ErrWaitPastDeadline = fmt.Errorf("quotagate: the wait would outlast the deadline: %w", context.DeadlineExceeded)
	// ErrBodyNotReplayable: the attempt failed in a retryable way, but the
	// request body cannot be sent again (the request has no GetBody).
	ErrBodyNotReplayable = errors.New("quotagate: the request body cannot be replayed")
	// ErrNotIdempotent: a network error on a request whose method is not
	// idempotent and which carries no Idempotency-Key; resending it could
	// repeat its effect.
	ErrNotIdempotent = errors.New("quotagate: network error on a non-idempotent request without an Idempotency-Key")
	// ErrPermanent: a network error that a retry cannot fix (a TLS
	// certificate error, an unsupported scheme).
	ErrPermanent = errors.New("quotagate: the error is not transient")
	// ErrBudgetDenied: the transport's own Layer refused the request for
	// a reason waiting cannot fix (no key, a bad or too high cost).
	ErrBudgetDenied = errors.New("quotagate: the client-side budget denied the request")
)

// Attempt describes one failed attempt of a request.
type Attempt struct {
	// Status is the response status, or 0 when the attempt got no
	// response.
	Status int
	// Err is the transport error of an attempt without a response.
	Err error
	// Wait is how long the server asked to wait (Retry-After, or the t of
	// an exhausted RateLimit policy); 0 when it did not say.
	Wait time.Duration
}

// RetryError is the error RoundTrip returns when it gives up. Use
// errors.As to get it from the *url.Error an http.Client returns.
// errors.Is sees both Err and the last attempt's transport error, so
// errors.Is(err, context.DeadlineExceeded) and errors.Is(err,
// ErrAttemptsExhausted) work as expected.
type RetryError struct {
	// Method and URL identify the request (the URL without its password).
	Method, URL string
	// Attempts is how many attempts were sent (0 when the transport gave
	// up before the first).
	Attempts int
	// Failures has one entry per failed attempt, in order.
	Failures []Attempt
	// Waited is the time spent waiting between and before attempts.
	Waited time.Duration
	// Err says why the transport stopped: one of the Err* values of this
	// package, or the context's error.
	Err error
}

func (e *RetryError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "quotagate: %s %s: %d attempt", e.Method, e.URL, e.Attempts)
	if e.Attempts != 1 {
		sb.WriteByte('s')
	}
	if len(e.Failures) > 0 {
		sb.WriteString(" (")
		for i, f := range e.Failures {
			if i > 0 {
				sb.WriteString(", ")
			}
			if f.Status != 0 {
				sb.WriteString(strconv.Itoa(f.Status))
			} else {
				sb.WriteString(f.Err.Error())
			}
		}
		sb.WriteByte(')')
	}
	sb.WriteString(", gave up: ")
	sb.WriteString(e.Err.Error())
	return sb.String()
}

// Unwrap returns Err and, when the last attempt failed without a response,
// its error.
func (e *RetryError) Unwrap() []error {
	errs := []error{e.Err}
	if n := len(e.Failures); n > 0 && e.Failures[n-1].Err != nil {
		errs = append(errs, e.Failures[n-1].Err)
	}
	return errs
}

// RoundTrip sends req as described on [Transport]. A panic in an attempt
// (in [Config].Base, the request's GetBody, or a key function of
// [Config].Layer) goes on up RoundTrip once the attempt has given back
// what it held: its pacing reservation and its layer decision's slots.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := roundTrip{t: t, req: req, ctx: req.Context()}
	resp, err := rt.run()
	if err != nil && !rt.bodySent && req.Body != nil {
		_ = req.Body.Close()
	}
	return resp, err
}

// roundTrip is the state of one RoundTrip.
type roundTrip struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context
	scope    *paceScope
	attempts int
	failures []Attempt
	waited   time.Duration
	gap      time.Duration // waited since the last attempt (or the start), which MaxWait bounds
	bodySent bool          // req.Body has been handed to the base transport
	reports  []policyReport
	seq      uint64 // the pacing reservation of the attempt, while reserved
	reserved bool

	replayable  bool   // req's body can be sent again
	retryErrors bool   // an attempt that fails without a response may be retried
	addKey      string // the Idempotency-Key added to each attempt, if any
}

func (rt *roundTrip) fail(err error) (*http.Response, error) {
	return nil, &RetryError{
		Method:   rt.req.Method,
		URL:      rt.req.URL.Redacted(),
		Attempts: rt.attempts,
		Failures: rt.failures,
		Waited:   rt.waited,
		Err:      err,
	}
}

// run sends attempts of the request, paced and through the transport's
// layer, until one is answered other than by a refusal, or it gives up.
func (rt *roundTrip) run() (*http.Response, error) {
	rt.prepare()
	// An attempt that ends here without an answer (an error, or a panic in
	// the base transport, the body's GetBody or a key function of the
	// layer) ends its pacing reservation, or the scope would wait for its
	// answer for good.
	defer rt.done(false)
	for {
		if err := rt.pace(); err != nil {
			return rt.fail(err)
		}
		d, areq, err := rt.start()
		if err != nil {
			return rt.fail(err)
		}
		resp, err := rt.send(d, areq)
		var wait time.Duration
		if err != nil {
			wait, err = rt.afterFailure(err)
		} else {
			var final bool
			final, wait, err = rt.afterResponse(d, resp)
			if final {
				return resp, nil
			}
		}
		if err != nil {
			return rt.fail(err)
		}
		if err := rt.sleep(wait, nil, true); err != nil {
			return rt.fail(err)
		}
	}
}

// prepare sets what the round trip may retry, choosing the Idempotency-Key
// to add to a request that has none when the transport adds them, and
// finds the request's pacing scope.
func (rt *roundTrip) prepare() {
	t, req := rt.t, rt.req
	rt.replayable = req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	key := req.Header.Get("Idempotency-Key")
	if key == "" && t.addKey && !idempotent(req.Method) {
		rt.addKey = newIdempotencyKey()
		key = rt.addKey
	}
	rt.retryErrors = idempotent(req.Method) || key != ""
	if t.pacing != nil {
		rt.scope = t.pacing.scope(t.scopeOf(req), time.Now())
	}
}

// start decides the transport's layer for the next attempt and builds the
// attempt's request. On an error, or a panic building the request, it ends
// the layer's decision, if any.
func (rt *roundTrip) start() (d *core.Decision, areq *http.Request, err error) {
	if d, err = rt.coordinate(); err != nil {
		return nil, nil, err
	}
	built := false
	defer func() {
		if d != nil && !built {
			d.Done(rt.ctx, 0)
		}
	}()
	areq, err = rt.attemptRequest(rt.addKey)
	built = err == nil
	return d, areq, err
}

// send sends the attempt areq through the base transport and then ends
// the layer's decision d, if any, with the response's status (0 when there
// is none, or when the base transport panicked): the attempt is no longer
// in flight.
func (rt *roundTrip) send(d *core.Decision, areq *http.Request) (resp *http.Response, err error) {
	rt.attempts++
	rt.gap = 0
	if d != nil {
		defer func() {
			status := 0
			if err == nil && resp != nil {
				status = resp.StatusCode
			}
			d.Done(rt.ctx, status)
		}()
	}
	return rt.t.base.RoundTrip(areq)
}

// afterFailure ends the pacing reservation of an attempt that failed with
// err, without a response, and records the failure. It returns the backoff
// before the next attempt, or the reason to give up.
func (rt *roundTrip) afterFailure(err error) (time.Duration, error) {
	rt.done(false)
	rt.failures = append(rt.failures, Attempt{Err: err})
	switch {
	case rt.ctx.Err() != nil:
		return 0, rt.ctx.Err()
	case permanent(err):
		return 0, ErrPermanent
	case !rt.retryErrors:
		return 0, ErrNotIdempotent
	case !rt.replayable:
		return 0, ErrBodyNotReplayable
	case rt.attempts >= rt.t.maxAttempts:
		return 0, ErrAttemptsExhausted
	}
	return rt.backoff(), nil
}

// afterResponse ends the pacing reservation with the policies resp
// reports, and reports whether resp is final: the answer to return. When
// it is not, resp is a refusal (429, or 503 with a Retry-After), which it
// refunds to the layer's decision d (429 only), records and drains; it
// then returns the wait before the next attempt, or the reason to give
// up.
func (rt *roundTrip) afterResponse(d *core.Decision, resp *http.Response) (final bool, wait time.Duration, err error) {
	t := rt.t
	now := time.Now()
	refused := resp.StatusCode == http.StatusTooManyRequests
	if rt.scope != nil || refused {
		rt.reports = parseReports(rt.reports[:0], resp.Header, now)
	}
	ra, hasRA := parseRetryAfter(resp.Header.Get("Retry-After"), now)
	if !refused && (resp.StatusCode != http.StatusServiceUnavailable || !hasRA) {
		rt.done(true)
		return true, 0, nil
	}
	if hasRA && rt.scope != nil && len(rt.reports) == 0 {
		rt.scope.block(ra, now)
	}
	rt.done(true)
	if d != nil && refused {
		// The server charged nothing for a refused request; neither
		// does the shared budget.
		t.layer.Engine().Refund(context.WithoutCancel(rt.ctx), d)
	}
	wait, named := rt.refusalWait(ra, hasRA)
	rt.failures = append(rt.failures, Attempt{Status: resp.StatusCode, Wait: wait})
	wait = min(wait, t.maxReset)
	drain(resp)
	switch {
	case named && wait > t.maxWait:
		return false, 0, ErrWaitTooLong
	case !rt.replayable:
		return false, 0, ErrBodyNotReplayable
	case rt.attempts >= t.maxAttempts:
		return false, 0, ErrAttemptsExhausted
	}
	if !named {
		wait = rt.backoff()
	}
	return false, wait, nil
}

// refusalWait returns the wait a refusal names: its Retry-After ra (when
// hasRA), else the latest reset of the exhausted policies it reports; and
// whether it names one at all.
func (rt *roundTrip) refusalWait(ra time.Duration, hasRA bool) (wait time.Duration, named bool) {
	wait, named = ra, hasRA
	if !named {
		for _, r := range rt.reports {
			if r.remaining == 0 && r.hasReset {
				wait, named = max(wait, r.reset), true
			}
		}
	}
	return wait, named
}

// done ends the pacing reservation of the attempt, if it holds one: when
// answered, with the reports of its response.
func (rt *roundTrip) done(answered bool) {
	if !rt.reserved {
		return
	}
	rt.reserved = false
	var reports []policyReport
	if answered {
		reports = rt.reports
	}
	rt.scope.done(rt.seq, answered, reports, time.Now())
}

// maxRounds bounds the re-evaluations of one wait (pacing state changes,
// shared-budget denials) before an attempt.
const maxRounds = 1 << 16

// pace waits until the pacing state lets an attempt start, and counts it:
// the attempt then holds a reservation, which done ends.
func (rt *roundTrip) pace() error {
	if rt.scope == nil {
		return nil
	}
	for range maxRounds {
		seq, wait, hard, changed := rt.scope.reserve(time.Now())
		if wait == 0 {
			rt.seq, rt.reserved = seq, true
			return nil
		}
		if !hard {
			// Only attempts in flight hold the last units: wait for their
			// answers, which do not take the reset's time, for as long as
			// the bounds leave.
			left, err := rt.room()
			if left <= 0 {
				return err
			}
			wait = min(wait, left)
		}
		if err := rt.sleep(wait, changed, hard); err != nil {
			return err
		}
	}
	return ErrTotalWaitExceeded
}

// coordinate decides the transport's layer for the next attempt, waiting
// out denials and shaping delays.
func (rt *roundTrip) coordinate() (*core.Decision, error) {
	l := rt.t.layer
	if l == nil {
		return nil, nil
	}
	creq := core.Request{
		Method:  rt.req.Method,
		Path:    rt.req.URL.Path,
		Header:  rt.req.Header,
		Values:  outgoing{rt.req},
		Context: rt.ctx,
	}
	for range maxRounds {
		d := new(core.Decision)
		l.Decide(&creq, d)
		if d.Allowed {
			if d.Delay > 0 {
				if err := rt.check(d.Delay); err != nil {
					l.Engine().Refund(context.WithoutCancel(rt.ctx), d)
					return nil, err
				}
				start := time.Now()
				err := l.Wait(rt.ctx, d)
				rt.count(time.Since(start))
				if err != nil {
					return nil, err
				}
			}
			return d, nil
		}
		switch d.Reason {
		case core.ReasonRateLimited, core.ReasonUnavailable:
		default:
			return nil, fmt.Errorf("%w: %s by budget %q: %w", ErrBudgetDenied, d.Reason, d.DeniedBy, d.Err)
		}
		wait := max(d.RetryAfter, time.Millisecond)
		if err := rt.sleep(wait, nil, true); err != nil {
			return nil, err
		}
	}
	return nil, ErrTotalWaitExceeded
}

// attemptRequest returns the request to send for the next attempt: req
// itself when nothing must change, else a clone with a fresh body from
// GetBody and the added Idempotency-Key.
func (rt *roundTrip) attemptRequest(addKey string) (*http.Request, error) {
	req := rt.req
	if rt.attempts == 0 && addKey == "" {
		rt.bodySent = true
		return req, nil
	}
	areq := req.Clone(rt.ctx)
	if addKey != "" {
		areq.Header.Set("Idempotency-Key", addKey)
	}
	if rt.attempts == 0 {
		rt.bodySent = true // the original body goes with the clone
		return areq, nil
	}
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("%w: GetBody: %w", ErrBodyNotReplayable, err)
		}
		areq.Body = body
	}
	return areq, nil
}

// backoff returns the full-jitter wait before the next retry:
// U(0, min(cap, base·2^n, MaxWait)) with n the number of retries so far.
func (rt *roundTrip) backoff() time.Duration {
	n := max(rt.attempts-1, 0)
	ceil := min(rt.t.backoffCap, rt.t.maxWait)
	if n < 62 {
		if b := rt.t.backoffBase << n; b>>n == rt.t.backoffBase && b < ceil {
			ceil = b
		}
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// room returns how much longer the request may wait before its next
// attempt, what MaxWait leaves of the current wait or, when less, what
// MaxTotalWait leaves; and the error to give up with when that is spent.
func (rt *roundTrip) room() (time.Duration, error) {
	left, err := rt.t.maxWait-rt.gap, ErrWaitTooLong
	if c := rt.t.maxTotalWait; c > 0 && c-rt.waited < left {
		left, err = c-rt.waited, ErrTotalWaitExceeded
	}
	return left, err
}

// count records d spent waiting.
func (rt *roundTrip) count(d time.Duration) {
	rt.waited += d
	rt.gap += d
}

// check reports whether a wait of d may start.
func (rt *roundTrip) check(d time.Duration) error {
	if rt.gap+d > rt.t.maxWait {
		return ErrWaitTooLong
	}
	if rt.t.maxTotalWait > 0 && rt.waited+d > rt.t.maxTotalWait {
		return ErrTotalWaitExceeded
	}
	if dl, ok := rt.ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
		return ErrWaitPastDeadline
	}
	return nil
}

// sleep waits for d, or until changed is closed, or until the context is
// done. A checked wait is first checked against MaxWait, the total-wait
// cap and the context's deadline, and not started when it would pass any.
func (rt *roundTrip) sleep(d time.Duration, changed <-chan struct{}, checked bool) error {
	if err := rt.ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if checked {
		if err := rt.check(d); err != nil {
			return err
		}
	}
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	defer func() { rt.count(time.Since(start)) }()
	select {
	case <-timer.C:
		return nil
	case <-changed:
		return nil
	case <-rt.ctx.Done():
		return rt.ctx.Err()
	}
}

// idempotent reports whether RFC 9110 defines method as idempotent.
func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// permanent reports whether err is a transport error a retry cannot fix.
func permanent(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	if errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "unsupported protocol scheme") || strings.Contains(msg, "net/http: invalid header")
}

// drain reads what is left of a retried response's body, up to a bound,
// so its connection can be reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// newIdempotencyKey returns a random Idempotency-Key value: an RFC 9651
// String of 32 hex digits.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = cryptorand.Read(b[:])
	return `"` + hex.EncodeToString(b[:]) + `"`
}

// outgoingKey is the request-scoped value under which a Transport's layer
// finds the outgoing request.
type outgoingKey struct{}

type outgoing struct{ r *http.Request }

func (o outgoing) Value(key any) any {
	if _, ok := key.(outgoingKey); ok {
		return o.r
	}
	return nil
}

// OutgoingRequest returns the outgoing request a [Transport]'s Layer is
// deciding, or nil when r is not such a request. Key, cost and quota
// functions of client-side budgets use it to read the host, the URL or
// anything else of the request.
func OutgoingRequest(r *core.Request) *http.Request {
	hr, _ := r.Value(outgoingKey{}).(*http.Request)
	return hr
}

// OutgoingHost is a [core.KeyFunc] for client-side budgets: it keys an
// outgoing request by its host (with port), so each API host has its own
// budget.
func OutgoingHost(r *core.Request) (string, error) {
	if hr := OutgoingRequest(r); hr != nil && hr.URL.Host != "" {
		return hr.URL.Host, nil
	}
	return "", fmt.Errorf("%w: not an outgoing request", core.ErrNoKey)
}
