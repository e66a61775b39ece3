package sendapi_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

// TestSendAPI runs the example's commands (one per router) as real
// servers on 127.0.0.1 and checks the Send API's rate-limit contract over
// real HTTP connections: on the memory store and on Redis, two instances
// sharing one Redis, and Redis failing and coming back. Windows are real
// minutes, aligned to the minute; every count is made inside one window
// (e2e.AwaitWindow). All subtests run at once, so the test takes one to
// two minutes, most of it waiting for a window to reset.
func TestSendAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example servers for one to two minutes")
	}
	concurrently(t, routers, func(t *testing.T, router string) {
		bin := e2e.Build(t, "./"+router)
		concurrently(t, []string{"memory", "redis", "two-instances", "fail-open"}, func(t *testing.T, name string) {
			switch name {
			case "memory":
				contract(t, start(t, bin, nil))
			case "redis":
				rd := e2e.StartRedis(t)
				contract(t, start(t, bin, slowRedis, "-redis", rd.Addr()))
			case "two-instances":
				twoInstances(t, bin)
			case "fail-open":
				failOpen(t, bin)
			}
		})
	})
}

// contract checks, on one server: 401 before any budget; email_send shared
// by an organisation's keys and management counted per key; plans and
// overrides; a batch counting once; the auth group per client IP; the
// rate-limit fields of every response and the denial; and idempotency
// under rate limiting, across a window reset.
func contract(t *testing.T, p *e2e.Process) {
	local := p.Client(t)                  // 127.0.0.1
	other := p.ClientFrom(t, "127.0.0.2") // another client IP
	third := p.ClientFrom(t, "127.0.0.3") // and another
	win := e2e.AwaitWindow(t, time.Minute, 15*time.Second)
	began := time.Now()

	// A missing, unknown, ambiguous or malformed credential: 401 before
	// any budget is charged, so no rate-limit fields.
	noKey := [][]string{
		nil,
		ak("ak_unknown_1"),
		{"Authorization", "Bearer " + acme1},
		{"Authorization", "AccessKey " + acme1, "Authorization", "AccessKey " + acme2},
		{"Authorization", "AccessKey"},
		{"Authorization", "AccessKey " + acme1 + " trailing"},
	}
	for _, h := range noKey {
		for _, route := range [][2]string{{"POST", "/v1/email/messages"}, {"POST", "/v1/sms/messages"}, {"GET", "/v1/webhooks"}, {"GET", "/v1/messages/msg_1"}} {
			r := do(t, local, route[0], route[1], `{"to":"a@example.com"}`, h...)
			if r.Status != http.StatusUnauthorized || errorKind(r.Body) != "authentication_error/E01001" {
				t.Fatalf("%s %s with %q: %v, want 401 authentication_error", route[0], route[1], h, r.Response)
			}
			noLimits(t, r)
		}
	}

	// email_send is shared by every key of acme: 100 per window however
	// the requests are spread over ak_acme_1 and ak_acme_2. A batch of 100
	// recipients counts as one request.
	batch := `{"to":[` + strings.TrimSuffix(strings.Repeat(`"r@example.com",`, 100), ",") + `]}`
	var sent []string
	for i := range 100 {
		key, body := acme1, `{"to":"a@example.com"}`
		if i%2 == 1 {
			key = acme2
		}
		if i%10 == 0 {
			body = batch
		}
		r := do(t, local, "POST", "/v1/email/messages", body, ak(key)...)
		expect(t, r, http.StatusAccepted, "email_send", 100, int64(99-i))
		if i < 2 {
			sent = append(sent, messageID(t, r))
		}
	}
	for _, key := range []string{acme1, acme2} {
		denied(t, do(t, local, "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(key)...), "email_send", 100)
	}

	// management is counted per acting credential: each key of acme has
	// its own 300, untouched by the exhausted email_send. An unknown id
	// answers 404, counts and carries the fields.
	expect(t, do(t, local, "GET", "/v1/webhooks", "", ak(acme1)...), http.StatusOK, "management", 300, 299)
	expect(t, do(t, local, "GET", "/v1/webhooks", "", ak(acme2)...), http.StatusOK, "management", 300, 299)
	expect(t, do(t, local, "GET", "/v1/messages/"+sent[0], "", ak(acme2)...), http.StatusOK, "management", 300, 298)
	expect(t, do(t, local, "GET", "/v1/messages/msg_unknown", "", ak(acme1)...), http.StatusNotFound, "management", 300, 298)
	// Another organisation cannot see acme's message: 404, counted.
	expect(t, do(t, local, "GET", "/v1/messages/"+sent[1], "", ak(globex)...), http.StatusNotFound, "management", 300, 299)
	wh := do(t, local, "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/sendapi"}`, ak(acme1)...)
	expect(t, wh, http.StatusCreated, "management", 300, 297)
	var whID string
	if _, err := fmt.Sscanf(string(wh.Body), `{"id":%q`, &whID); err != nil || !strings.HasPrefix(whID, "wh_") {
		t.Fatalf("webhook id in %s: %v", wh.Body, err)
	}
	expect(t, do(t, local, "DELETE", "/v1/webhooks/"+whID, "", ak(acme1)...), http.StatusNoContent, "management", 300, 296)
	expect(t, do(t, local, "DELETE", "/v1/webhooks/"+whID, "", ak(acme1)...), http.StatusNotFound, "management", 300, 295)
	expect(t, do(t, local, "GET", "/v1/webhooks", "", ak(acme2)...), http.StatusOK, "management", 300, 297)

	// Plans: globex is on the scale plan, +900 on both send groups.
	expect(t, do(t, local, "POST", "/v1/email/messages", batch, ak(globex)...), http.StatusAccepted, "email_send", 1000, 999)
	expect(t, do(t, local, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, ak(globex)...), http.StatusAccepted, "sms_send", 960, 959)
	// A batch over 100 recipients is refused by the handler, after the
	// limiter counted the request.
	over := `{"to":[` + strings.TrimSuffix(strings.Repeat(`"r@example.com",`, 101), ",") + `]}`
	expect(t, do(t, local, "POST", "/v1/email/messages", over, ak(globex)...), http.StatusBadRequest, "email_send", 1000, 998)

	// Override: initech's email_send is 50, replacing base and plan; its
	// sms_send is the starter plan's 60.
	for i := range 50 {
		expect(t, do(t, local, "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(initech)...), http.StatusAccepted, "email_send", 50, int64(49-i))
	}
	denied(t, do(t, local, "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(initech)...), "email_send", 50)
	expect(t, do(t, local, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, ak(initech)...), http.StatusAccepted, "sms_send", 60, 59)

	// auth: per client IP, 10, login and password reset together,
	// without a credential. A forwarding header from a client that is not
	// a trusted proxy changes nothing.
	for i := range 10 {
		if i%2 == 0 {
			expect(t, do(t, local, "POST", "/v1/auth/password-reset", `{"email":"a@example.com"}`), http.StatusAccepted, "auth", 10, int64(9-i))
		} else {
			expect(t, do(t, local, "POST", "/v1/auth/login", `{"email":"a@example.com","password":"wrong"}`), http.StatusUnauthorized, "auth", 10, int64(9-i))
		}
	}
	denied(t, do(t, local, "POST", "/v1/auth/login", `{"email":"a@example.com","password":"wrong"}`), "auth", 10)
	denied(t, do(t, local, "POST", "/v1/auth/password-reset", `{"email":"a@example.com"}`, "X-Forwarded-For", "198.51.100.7"), "auth", 10)
	expect(t, do(t, other, "POST", "/v1/auth/password-reset", `{"email":"a@example.com"}`), http.StatusAccepted, "auth", 10, 9)
	expect(t, do(t, third, "POST", "/v1/auth/login", `{"email":"ops@acme.example","password":"correct horse battery staple"}`), http.StatusOK, "auth", 10, 9)

	// Idempotency: a completed key replays its first response, same
	// status and body, marked Idempotent-Replayed; the first completion
	// is not marked. The quoted (sf-string) form is the same key.
	sms := `{"to":["+15550100","+15550101"]}`
	first := do(t, local, "POST", "/v1/sms/messages", sms, idem("k-first", ak(acme1)...)...)
	expect(t, first, http.StatusAccepted, "sms_send", 60, 59)
	if v := first.Header.Get("Idempotent-Replayed"); v != "" {
		t.Fatalf("first completion carries Idempotent-Replayed: %q", v)
	}
	replay := func(r call, of call) {
		t.Helper()
		if r.Status != of.Status || string(r.Body) != string(of.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %v\nwant %d %s with Idempotent-Replayed: true", r.Response, of.Status, of.Body)
		}
	}
	r := do(t, local, "POST", "/v1/sms/messages", sms, idem("k-first", ak(acme2)...)...)
	replay(r, first)
	groupOf(t, r, "sms_send") // a replay is a request of its group
	replay(do(t, local, "POST", "/v1/sms/messages", sms, idem(`"k-first"`, ak(acme1)...)...), first)
	// The same key with another request is refused.
	r = do(t, local, "POST", "/v1/sms/messages", `{"to":"+15550199"}`, idem("k-first", ak(acme1)...)...)
	if r.Status != http.StatusUnprocessableEntity || errorKind(r.Body) != "idempotency_error/E01006" {
		t.Fatalf("key reused with another body: %v, want 422", r.Response)
	}
	// Exhaust sms_send, then send with a new key: rate-limited, and the
	// key is not recorded (a second try is rate-limited too, not replayed).
	left := groupOf(t, r, "sms_send").r
	for i := range left {
		expect(t, do(t, local, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, ak(acme2)...), http.StatusAccepted, "sms_send", 60, left-1-i)
	}
	limited := do(t, local, "POST", "/v1/sms/messages", sms, idem("k-limited", ak(acme1)...)...)
	retry := denied(t, limited, "sms_send", 60)
	denied(t, do(t, local, "POST", "/v1/sms/messages", sms, idem("k-limited", ak(acme1)...)...), "sms_send", 60)
	win.Check(t)
	t.Logf("counted in %v; waiting %v for the window to reset", time.Since(began).Round(time.Millisecond), time.Until(limited.recv.Add(retry)).Round(time.Millisecond))

	// Retry-After later, the same key performs the work once: a first
	// completion, then replays. Waiting exactly Retry-After from the
	// denial is enough: it is never earlier than the reset.
	time.Sleep(time.Until(limited.recv.Add(retry)))
	done := do(t, local, "POST", "/v1/sms/messages", sms, idem("k-limited", ak(acme1)...)...)
	expect(t, done, http.StatusAccepted, "sms_send", 60, 59)
	if v := done.Header.Get("Idempotent-Replayed"); v != "" {
		t.Fatalf("the retried key's first completion carries Idempotent-Replayed: %q", v)
	}
	if messageID(t, done) == messageID(t, first) {
		t.Fatal("the retried key replayed another key's response")
	}
	replay(do(t, local, "POST", "/v1/sms/messages", sms, idem("k-limited", ak(acme2)...)...), done)
	// The key completed in the previous window still replays.
	replay(do(t, local, "POST", "/v1/sms/messages", sms, idem("k-first", ak(acme1)...)...), first)
	// And the organisation's email_send is full again.
	expect(t, do(t, local, "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(acme2)...), http.StatusAccepted, "email_send", 100, 99)
}

// twoInstances runs two instances of one command on one Redis and checks
// that they share every budget exactly: of concurrent requests spread over
// both, exactly the quota is admitted, each remaining count seen once; and
// an idempotency key completed on one instance replays on the other.
func twoInstances(t *testing.T, bin string) {
	rd := e2e.StartRedis(t)
	a := start(t, bin, slowRedis, "-redis", rd.Addr())
	b := start(t, bin, slowRedis, "-redis", rd.Addr())
	both := []*e2e.Client{a.Client(t), b.Client(t)}
	win := e2e.AwaitWindow(t, time.Minute, 30*time.Second)

	acmeKeys := func(i int) []string {
		if i/2%2 == 0 { // both keys on both instances
			return ak(acme1)
		}
		return ak(acme2)
	}
	admitted(t, spread(t, both, 130, 4, load{method: "POST", path: "/v1/email/messages", body: `{"to":"a@example.com"}`, header: acmeKeys}), "email_send", http.StatusAccepted, 100)
	admitted(t, spread(t, both, 80, 4, load{method: "POST", path: "/v1/sms/messages", body: `{"to":"+15550100"}`, header: acmeKeys}), "sms_send", http.StatusAccepted, 60)
	admitted(t, spread(t, both, 330, 4, load{method: "GET", path: "/v1/webhooks", header: func(int) []string { return ak(acme1) }}), "management", http.StatusOK, 300)
	admitted(t, spread(t, both, 16, 4, load{method: "POST", path: "/v1/auth/password-reset", body: `{"email":"a@example.com"}`}), "auth", http.StatusAccepted, 10)
	// acme's other key still has its own management budget on both.
	expect(t, do(t, both[1], "GET", "/v1/webhooks", "", ak(acme2)...), http.StatusOK, "management", 300, 299)
	expect(t, do(t, both[0], "GET", "/v1/webhooks", "", ak(acme2)...), http.StatusOK, "management", 300, 298)
	win.Check(t)

	// Idempotency keys live in Redis too.
	sms := `{"to":"+15550100"}`
	first := do(t, both[0], "POST", "/v1/sms/messages", sms, idem("k-shared", ak(globex)...)...)
	expect(t, first, http.StatusAccepted, "sms_send", 960, 959)
	r := do(t, both[1], "POST", "/v1/sms/messages", sms, idem("k-shared", ak(globex)...)...)
	if r.Status != first.Status || string(r.Body) != string(first.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay on the other instance: %v\nwant %d %s replayed", r.Response, first.Status, first.Body)
	}
}

// failOpen kills the Redis server under a running instance: requests pass
// (even from a client whose budget was exhausted), the store error is
// logged, and idempotent sends, which cannot be deduplicated, answer 503.
// When Redis restarts (empty), limiting resumes.
func failOpen(t *testing.T, bin string) {
	rd := e2e.StartRedis(t)
	p := start(t, bin, slowRedis, "-redis", rd.Addr())
	c := p.Client(t)
	reset := func(c *e2e.Client) call {
		return do(t, c, "POST", "/v1/auth/password-reset", `{"email":"a@example.com"}`)
	}
	win := e2e.AwaitWindow(t, time.Minute, 10*time.Second)
	for i := range 10 {
		expect(t, reset(c), http.StatusAccepted, "auth", 10, int64(9-i))
	}
	denied(t, reset(c), "auth", 10)
	win.Check(t)

	rd.Kill()
	for range 5 {
		r := reset(c)
		if r.Status != http.StatusAccepted {
			t.Fatalf("with Redis down: %v, want 202 (fail-open)", r.Response)
		}
		failedOpen(t, r, "auth", 10)
	}
	r := do(t, c, "POST", "/v1/email/messages", `{"to":"a@example.com"}`, ak(acme1)...)
	if r.Status != http.StatusAccepted {
		t.Fatalf("send with Redis down: %v, want 202", r.Response)
	}
	failedOpen(t, r, "email_send", 100)
	r = do(t, c, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, idem("k-down", ak(acme1)...)...)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || errorKind(r.Body) != "api_error/E01007" {
		t.Fatalf("idempotent send with Redis down: %v, want 503 with Retry-After", r.Response)
	}
	if !p.WaitStderr("event=store_error", 5*time.Second) {
		t.Fatalf("no store error logged with Redis down; stderr:\n%s", p.Stderr())
	}

	rd.Restart()
	// Limiting resumes once the circuit breaker probes Redis again. Redis
	// comes back empty: the first counted request leaves 9.
	win = e2e.AwaitWindow(t, time.Minute, 25*time.Second)
	other := p.ClientFrom(t, "127.0.0.2")
	deadline := time.Now().Add(15 * time.Second)
	for {
		r = reset(other)
		if len(r.Header.Values("RateLimit")) > 0 {
			break
		}
		if r.Status != http.StatusAccepted || time.Now().After(deadline) {
			t.Fatalf("limiting did not resume within 15s of Redis restarting: %v\nstderr:\n%s", r.Response, p.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(t, r, http.StatusAccepted, "auth", 10, 9)
	for i := range 9 {
		expect(t, reset(other), http.StatusAccepted, "auth", 10, int64(8-i))
	}
	denied(t, reset(other), "auth", 10)
	win.Check(t)
	// Idempotency is back too.
	first := do(t, c, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, idem("k-down", ak(acme1)...)...)
	if first.Status != http.StatusAccepted || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("idempotent send after recovery: %v", first.Response)
	}
	r = do(t, c, "POST", "/v1/sms/messages", `{"to":"+15550100"}`, idem("k-down", ak(acme1)...)...)
	if string(r.Body) != string(first.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after recovery: %v", r.Response)
	}
}
