package sendapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/keyfunc"
)

// Deps are the parts of an App that depend on where state lives.
type Deps struct {
	// Store holds the budgets' counters: a memstore.Store, or a
	// redisstore.Store shared by every instance. Required.
	Store core.Store
	// Idempotency remembers idempotency keys: a MemoryIdempotency, or a
	// RedisIdempotency shared by every instance. Required.
	Idempotency IdempotencyStore
	// Logger receives the application's and the engine's log lines (store
	// errors, denials). Default slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told about decisions and errors in addition
	// to the logger (for example a metrics observer).
	Observer core.Observer
}

// App is the Send API: its engine, one layer per group, and its
// router-neutral handlers. Create it with [New]; it is safe for concurrent
// use.
type App struct {
	cfg      Config
	log      *slog.Logger
	logs     *observe.Logger
	engine   *core.Engine
	layers   map[string]*core.Layer
	dir      *Directory
	idem     IdempotencyStore
	messages *messageLog
	webhooks *webhookStore
}

// New builds the App of cfg: the directory of credentials, the budgets, the
// engine on opt.Store (failing open: when the store cannot answer, requests
// pass and the error is logged), and one layer per group.
func New(cfg Config, opt Deps) (*App, error) {
	if opt.Store == nil || opt.Idempotency == nil {
		return nil, errors.New("sendapi: Deps.Store and Deps.Idempotency are required")
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = DefaultIdempotencyTTL
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	h, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: cfg.KeySecret})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKeySecret, err)
	}
	dir, err := NewDirectory(h)
	if err != nil {
		return nil, err
	}
	subjects, err := policy.NewSubjects(dir.Subject, policy.CacheConfig{})
	if err != nil {
		return nil, err
	}
	bs, err := budgets(h, cfg.TrustedProxies, subjects)
	if err != nil {
		return nil, err
	}
	logs, err := observe.NewLogger(log, observe.LoggerConfig{})
	if err != nil {
		return nil, err
	}
	eng, err := core.New(core.Config{
		Store:       opt.Store,
		Budgets:     bs,
		Headers:     core.HeadersIETF,
		Deny:        Deny,
		Observer:    observe.Multi(logs, opt.Observer),
		FailureMode: core.FailOpen,
	})
	if err != nil {
		return nil, err
	}
	a := &App{
		cfg: cfg, log: log, logs: logs, engine: eng, dir: dir, idem: opt.Idempotency,
		layers:   map[string]*core.Layer{},
		messages: newMessageLog(maxMessages),
		webhooks: newWebhookStore(),
	}
	for _, g := range groups {
		l, err := eng.Layer(core.Use(g))
		if err != nil {
			return nil, err
		}
		a.layers[g] = l
	}
	return a, nil
}

// FlushLogs writes the counts of log lines the engine's logger suppressed
// (it rate-limits its own output); call it at shutdown.
func (a *App) FlushLogs() { a.logs.Flush() }

// Engine returns the App's engine.
func (a *App) Engine() *core.Engine { return a.engine }

// Layer returns the layer of group (GroupEmailSend, ...), for the router's
// quotagate adapter: nethttp.ForLayer(app.Layer(sendapi.GroupEmailSend)).
// It panics on an unknown group, a programming error.
func (a *App) Layer(group string) *core.Layer {
	l, ok := a.layers[group]
	if !ok {
		panic(fmt.Sprintf("sendapi: unknown group %q", group))
	}
	return l
}

// Response is what a handler answers, for the router to write: Status,
// the extra Header fields, Body (JSON; nil for none, as with 204) and, for
// a replayed idempotent send, "Idempotent-Replayed: true".
type Response struct {
	Status   int
	Header   http.Header
	Body     []byte
	Replayed bool
}

// Fields returns the header fields to set besides Content-Type, in a
// stable order: Header's, then Idempotent-Replayed when Replayed.
func (r *Response) Fields() [][2]string {
	var out [][2]string
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		for _, v := range r.Header[k] {
			out = append(out, [2]string{k, v})
		}
	}
	if r.Replayed {
		out = append(out, [2]string{HeaderReplayed, "true"})
	}
	return out
}

func jsonResponse(status int, v any) Response {
	b, err := marshal(v)
	if err != nil {
		return errorResponse(http.StatusInternalServerError, Error{Type: "api_error", Code: CodeUnavailable, Name: "InternalError", Message: "The response could not be rendered."})
	}
	return Response{Status: status, Body: b}
}

func errorResponse(status int, e Error) Response {
	return Response{Status: status, Body: errorBody(e)}
}

func invalid(format string, args ...any) Response {
	return errorResponse(http.StatusBadRequest, Error{Type: "invalid_request_error", Code: CodeInvalidRequest, Name: "InvalidRequest", Message: fmt.Sprintf(format, args...)})
}

func notFound(what string) Response {
	return errorResponse(http.StatusNotFound, Error{Type: "invalid_request_error", Code: CodeNotFound, Name: "NotFound", Message: what + " not found."})
}

// Authenticate finds the credential of a request from its Authorization
// field lines. It returns the credential, or the 401 response to write:
// the request then reaches no quotagate layer and is charged nothing.
func (a *App) Authenticate(authorization []string) (*Credential, *Response) {
	key, err := ParseAccessKey(authorization)
	var cred *Credential
	if err == nil {
		cred = a.dir.Lookup(key)
	}
	if cred == nil {
		msg := "A valid \"Authorization: AccessKey <key>\" header is required."
		if err == nil {
			msg = "The access key is not valid."
		}
		r := errorResponse(http.StatusUnauthorized, Error{Type: "authentication_error", Code: CodeUnauthorized, Name: "Unauthorized", Message: msg})
		r.Header = http.Header{"Www-Authenticate": {"AccessKey"}}
		return nil, &r
	}
	return cred, nil
}

// MaxBodySize is the largest request body read, in bytes.
const MaxBodySize = 64 << 10

// ReadBody reads a request body of at most MaxBodySize bytes. On failure
// it returns the response to write (413 for a larger body).
func ReadBody(r io.Reader) ([]byte, *Response) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBodySize+1))
	if err != nil {
		resp := invalid("The request body could not be read.")
		return nil, &resp
	}
	if len(b) > MaxBodySize {
		resp := errorResponse(http.StatusRequestEntityTooLarge, Error{Type: "invalid_request_error", Code: CodeInvalidRequest, Name: "InvalidRequest", Message: fmt.Sprintf("The request body exceeds %d bytes.", MaxBodySize)})
		return nil, &resp
	}
	return b, nil
}

// Routes of the send handlers, part of an idempotent request's
// fingerprint.
const (
	RouteEmail = "POST /v1/email/messages"
	RouteSMS   = "POST /v1/sms/messages"
)

// How long a claimed idempotency key stays pending at most, and how long
// an idempotency store call may take at least (REDIS_TIMEOUT when longer).
const (
	idempotencyLock    = time.Minute
	idempotencyTimeout = 250 * time.Millisecond
)

// idemTimeout bounds one idempotency store call.
func (a *App) idemTimeout() time.Duration { return max(idempotencyTimeout, a.cfg.RedisTimeout) }

// SendEmail handles POST /v1/email/messages for cred, with the request's
// Idempotency-Key field lines and body.
func (a *App) SendEmail(ctx context.Context, cred *Credential, idempotencyKey []string, body []byte) Response {
	return a.send(ctx, RouteEmail, "email", cred, idempotencyKey, body)
}

// SendSMS handles POST /v1/sms/messages for cred, with the request's
// Idempotency-Key field lines and body.
func (a *App) SendSMS(ctx context.Context, cred *Credential, idempotencyKey []string, body []byte) Response {
	return a.send(ctx, RouteSMS, "sms", cred, idempotencyKey, body)
}

// send runs a send, once per idempotency key. It is called only for
// requests the group's layer admitted, so a rate-limited request never
// claims its key. A completed (2xx) response is recorded and replayed for
// later requests with the same key and request; any other outcome releases
// the key, so the client may retry with it.
func (a *App) send(ctx context.Context, route, channel string, cred *Credential, idemLines []string, body []byte) Response {
	if cred == nil {
		return errorResponse(http.StatusUnauthorized, Error{Type: "authentication_error", Code: CodeUnauthorized, Name: "Unauthorized", Message: "Not authenticated."})
	}
	key, err := ParseIdempotencyKey(idemLines)
	if err != nil {
		return invalid("%v.", err)
	}
	if key == "" {
		return a.accept(channel, cred, body)
	}
	skey, fp := scopeKey(cred.Org.ID, key), fingerprint(route, body)
	// The store calls must finish even when the client goes away.
	ctx = context.WithoutCancel(ctx)
	bctx, cancel := context.WithTimeout(ctx, a.idemTimeout())
	rec, token, err := a.idem.Begin(bctx, skey, fp, idempotencyLock)
	cancel()
	if err != nil {
		a.log.Warn("sendapi: idempotency store unavailable", "event", "idempotency_error", "op", "begin", "error", err)
		r := errorResponse(http.StatusServiceUnavailable, Error{Type: "api_error", Code: CodeUnavailable, Name: "Unavailable", Message: "Idempotent requests cannot be served right now; retry with the same Idempotency-Key."})
		r.Header = http.Header{"Retry-After": {"1"}}
		return r
	}
	if rec != nil {
		switch {
		case rec.Fingerprint != fp:
			return errorResponse(http.StatusUnprocessableEntity, Error{Type: "idempotency_error", Code: CodeIdempotencyMismatch, Name: "IdempotencyKeyReused", Message: "This Idempotency-Key was used with another request."})
		case rec.Pending:
			return errorResponse(http.StatusConflict, Error{Type: "idempotency_error", Code: CodeIdempotencyConflict, Name: "IdempotencyKeyInUse", Message: "A request with this Idempotency-Key is in progress."})
		}
		return Response{Status: rec.Status, Body: rec.Body, Replayed: true}
	}
	completed := false
	defer func() {
		if !completed {
			rctx, cancel := context.WithTimeout(ctx, a.idemTimeout())
			defer cancel()
			if err := a.idem.Release(rctx, skey, token); err != nil {
				a.log.Warn("sendapi: idempotency store unavailable", "event", "idempotency_error", "op", "release", "error", err)
			}
		}
	}()
	resp := a.accept(channel, cred, body)
	if resp.Status < 200 || resp.Status > 299 {
		return resp
	}
	cctx, cancel := context.WithTimeout(ctx, a.idemTimeout())
	defer cancel()
	ok, err := a.idem.Complete(cctx, skey, token, Record{Fingerprint: fp, Status: resp.Status, Body: resp.Body}, a.cfg.IdempotencyTTL)
	switch {
	case err != nil:
		// The work is done; a retry with this key would do it again.
		a.log.Warn("sendapi: idempotent response not recorded", "event", "idempotency_error", "op", "complete", "error", err)
	case !ok:
		a.log.Warn("sendapi: idempotent response not recorded: the key's claim expired and was taken", "event", "idempotency_error", "op", "complete")
	}
	completed = true
	return resp
}

// MaxRecipients is the most recipients one send accepts. A batch counts as
// one request in its group, however many recipients it has.
const MaxRecipients = 100

// maxRecipientLen is the longest recipient (an e-mail address or a phone
// number), in bytes.
const maxRecipientLen = 320

// SendRequest is the part of a send's body the example reads.
type SendRequest struct {
	// To lists the recipients: {"to":"a@example.com"} or
	// {"to":["a@example.com","b@example.com"]}.
	To []string
}

// ParseSendRequest parses a send's JSON body: an object whose "to" is one
// recipient or an array of 1 to MaxRecipients recipients, each a non-empty
// string of at most 320 bytes without control characters. Other members
// are ignored.
func ParseSendRequest(body []byte) (SendRequest, error) {
	var raw struct {
		To json.RawMessage `json:"to"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return SendRequest{}, errors.New("the body must be a JSON object")
	}
	if len(raw.To) == 0 || string(raw.To) == "null" {
		return SendRequest{}, errors.New(`"to" is required`)
	}
	var to []string
	var one string
	if err := json.Unmarshal(raw.To, &one); err == nil {
		to = []string{one}
	} else if err := json.Unmarshal(raw.To, &to); err != nil {
		return SendRequest{}, errors.New(`"to" must be a string or an array of strings`)
	}
	if len(to) == 0 || len(to) > MaxRecipients {
		return SendRequest{}, fmt.Errorf(`"to" must hold 1 to %d recipients, not %d`, MaxRecipients, len(to))
	}
	for i, r := range to {
		if r == "" || len(r) > maxRecipientLen {
			return SendRequest{}, fmt.Errorf(`recipient %d must be 1 to %d bytes long`, i, maxRecipientLen)
		}
		for _, c := range []byte(r) {
			if c < 0x20 || c == 0x7f {
				return SendRequest{}, fmt.Errorf(`recipient %d holds a control character`, i)
			}
		}
	}
	return SendRequest{To: to}, nil
}

// accept validates a send and queues it: 202 with the message's ID.
func (a *App) accept(channel string, cred *Credential, body []byte) Response {
	req, err := ParseSendRequest(body)
	if err != nil {
		return invalid("%v.", err)
	}
	id := "msg_" + newToken()
	a.messages.add(message{ID: id, Org: cred.Org.ID, Channel: channel, Recipients: len(req.To)})
	return jsonResponse(http.StatusAccepted, map[string]any{
		"id": id, "channel": channel, "status": "accepted", "recipients": len(req.To),
	})
}

// GetMessage handles GET /v1/messages/{id}: the message, if cred's
// organisation sent it through this instance, else 404. Either way the
// request counted in the management group.
func (a *App) GetMessage(cred *Credential, id string) Response {
	m, ok := a.messages.get(id)
	if !ok || cred == nil || m.Org != cred.Org.ID {
		return notFound("Message")
	}
	return jsonResponse(http.StatusOK, map[string]any{
		"id": m.ID, "channel": m.Channel, "status": "accepted", "recipients": m.Recipients,
	})
}

// ListWebhooks handles GET /v1/webhooks.
func (a *App) ListWebhooks(cred *Credential) Response {
	return jsonResponse(http.StatusOK, map[string]any{"data": a.webhooks.list(cred.Org.ID)})
}

// CreateWebhook handles POST /v1/webhooks with {"url":"https://..."}.
func (a *App) CreateWebhook(cred *Credential, body []byte) Response {
	var req struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return invalid("The body must be a JSON object.")
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(req.URL) > 2048 {
		return invalid(`"url" must be an absolute http or https URL of at most 2048 bytes.`)
	}
	w, ok := a.webhooks.add(cred.Org.ID, req.URL)
	if !ok {
		return invalid("An organisation has at most %d webhooks.", maxWebhooks)
	}
	return jsonResponse(http.StatusCreated, w)
}

// DeleteWebhook handles DELETE /v1/webhooks/{id}: 204, or 404.
func (a *App) DeleteWebhook(cred *Credential, id string) Response {
	if !a.webhooks.remove(cred.Org.ID, id) {
		return notFound("Webhook")
	}
	return Response{Status: http.StatusNoContent}
}

// Demo sign-in of POST /v1/auth/login.
const (
	DemoEmail    = "ops@acme.example"
	DemoPassword = "correct horse battery staple"
)

// Login handles POST /v1/auth/login with {"email":…,"password":…}: 200
// for the demo user, 401 otherwise.
func (a *App) Login(body []byte) Response {
	var req struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Email == "" || req.Password == "" {
		return invalid(`The body must be a JSON object with "email" and "password".`)
	}
	ok := subtle.ConstantTimeCompare([]byte(req.Email), []byte(DemoEmail)) &
		subtle.ConstantTimeCompare([]byte(req.Password), []byte(DemoPassword))
	if ok != 1 {
		return errorResponse(http.StatusUnauthorized, Error{Type: "authentication_error", Code: CodeUnauthorized, Name: "InvalidCredentials", Message: "The e-mail address or the password is wrong."})
	}
	return jsonResponse(http.StatusOK, map[string]string{"status": "signed_in", "organisation": "acme"})
}

// PasswordReset handles POST /v1/auth/password-reset with {"email":…}:
// 202 whether or not the address is known, so that it reveals nothing.
func (a *App) PasswordReset(body []byte) Response {
	var req struct {
		Email string `json:"email"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Email == "" {
		return invalid(`The body must be a JSON object with "email".`)
	}
	return jsonResponse(http.StatusAccepted, map[string]string{"status": "accepted"})
}

// maxMessages bounds the messages an instance remembers for GET
// /v1/messages/{id}; the oldest are forgotten first.
const maxMessages = 10_000

type message struct {
	ID         string
	Org        string
	Channel    string
	Recipients int
}

// messageLog remembers the latest messages sent through this instance.
type messageLog struct {
	mu   sync.Mutex
	byID map[string]message
	ring []string
	next int
}

func newMessageLog(n int) *messageLog {
	return &messageLog{byID: make(map[string]message, n), ring: make([]string, n)}
}

func (l *messageLog) add(m message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.ring[l.next]; old != "" {
		delete(l.byID, old)
	}
	l.ring[l.next] = m.ID
	l.next = (l.next + 1) % len(l.ring)
	l.byID[m.ID] = m
}

func (l *messageLog) get(id string) (message, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.byID[id]
	return m, ok
}

// maxWebhooks bounds the webhooks of one organisation.
const maxWebhooks = 100

// Webhook is a registered webhook.
type Webhook struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// webhookStore holds each organisation's webhooks in this instance.
type webhookStore struct {
	mu    sync.Mutex
	byOrg map[string][]Webhook
}

func newWebhookStore() *webhookStore { return &webhookStore{byOrg: map[string][]Webhook{}} }

func (s *webhookStore) list(org string) []Webhook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Webhook{}, s.byOrg[org]...)
}

func (s *webhookStore) add(org, u string) (Webhook, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byOrg[org]) >= maxWebhooks {
		return Webhook{}, false
	}
	w := Webhook{ID: "wh_" + newToken(), URL: u}
	s.byOrg[org] = append(s.byOrg[org], w)
	return w, true
}

func (s *webhookStore) remove(org, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.byOrg[org]
	i := slices.IndexFunc(ws, func(w Webhook) bool { return w.ID == id })
	if i < 0 {
		return false
	}
	s.byOrg[org] = slices.Delete(ws, i, i+1)
	return true
}
