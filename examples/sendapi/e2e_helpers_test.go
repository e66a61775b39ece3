package sendapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

// The example's access keys (see the README).
const (
	acme1   = "ak_acme_1"
	acme2   = "ak_acme_2"
	globex  = "ak_globex_1"
	initech = "ak_initech_1"
)

// routers are the example's commands, one per router.
var routers = []string{"nethttp", "gin", "echo", "fiber"}

// hermetic removes the example's variables from the inherited environment.
var hermetic = []string{"SENDAPI_KEY_SECRET", "TRUSTED_PROXIES", "IDEMPOTENCY_TTL", "REDIS_TIMEOUT"}

// slowRedis gives Redis calls more time than the default 50 ms. The tests
// run sixteen servers and a dozen Redis servers at once on a small
// machine; a call that times out lets its request pass unlimited
// (fail-open, by design), which an exact count would then report as a
// failure of the limiter. The fail-open behaviour itself is tested by
// killing Redis.
var slowRedis = []string{"REDIS_TIMEOUT=2s"}

// start starts an example with args and env, the example's own variables
// otherwise unset.
func start(t *testing.T, bin string, env []string, args ...string) *e2e.Process {
	t.Helper()
	p := e2e.Start(t, bin, e2e.Config{Args: args, Env: env, Unset: hermetic})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr of the example at %s:\n%s", p.Addr, p.Stderr())
		}
	})
	return p
}

// concurrently runs fn as one subtest of t per name, all at once. The
// subtests spend most of their time waiting for minute boundaries, not on
// the CPU, and t.Parallel would run only -parallel (GOMAXPROCS) of them at
// a time; t.Run may be called from several goroutines.
func concurrently(t *testing.T, names []string, fn func(t *testing.T, name string)) {
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(n, func(t *testing.T) { fn(t, n) })
		}()
	}
	wg.Wait()
}

// ak returns the Authorization header of an access key.
func ak(key string) []string { return []string{"Authorization", "AccessKey " + key} }

// idem returns the Idempotency-Key header, with more header fields.
func idem(key string, more ...string) []string {
	return append([]string{"Idempotency-Key", key}, more...)
}

// call is a response with the times its request was sent and its
// response received.
type call struct {
	*e2e.Response
	sent, recv time.Time
}

func do(t *testing.T, c *e2e.Client, method, path, body string, header ...string) call {
	t.Helper()
	sent := time.Now()
	r := c.Do(t, method, path, body, header...)
	return call{Response: r, sent: sent, recv: time.Now()}
}

// fieldsOf is one group's rate-limit fields.
type fieldsOf struct{ q, w, r, t int64 }

// rateLimits parses a response's RateLimit-Policy and RateLimit fields as
// RFC 9651 lists (with an independent parser) and returns each group's
// values. Groups are sf-strings; q and w are required in the policy, r and
// t in RateLimit, all integers; both fields name the same groups.
func rateLimits(h http.Header) (map[string]fieldsOf, error) {
	out := map[string]fieldsOf{}
	if len(h.Values("RateLimit-Policy")) == 0 && len(h.Values("RateLimit")) == 0 {
		return out, nil
	}
	pol, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy"))
	if err != nil {
		return nil, fmt.Errorf("RateLimit-Policy %q: %v", h.Values("RateLimit-Policy"), err)
	}
	lim, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
	if err != nil {
		return nil, fmt.Errorf("RateLimit %q: %v", h.Values("RateLimit"), err)
	}
	param := func(it httpsfv.Item, k string) (int64, error) {
		v, ok := it.Params.Get(k)
		if !ok {
			return 0, fmt.Errorf("no %s parameter", k)
		}
		n, ok := v.(int64)
		if !ok {
			return 0, fmt.Errorf("%s=%v is not an integer", k, v)
		}
		return n, nil
	}
	name := func(m httpsfv.Member) (httpsfv.Item, string, error) {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return it, "", fmt.Errorf("member %v is not an item", m)
		}
		s, ok := it.Value.(string)
		if !ok {
			return it, "", fmt.Errorf("member %v is not an sf-string", it.Value)
		}
		return it, s, nil
	}
	for _, m := range pol {
		it, n, err := name(m)
		if err != nil {
			return nil, fmt.Errorf("RateLimit-Policy: %v", err)
		}
		f := out[n]
		if f.q, err = param(it, "q"); err != nil {
			return nil, fmt.Errorf("RateLimit-Policy %q: %v", n, err)
		}
		if f.w, err = param(it, "w"); err != nil {
			return nil, fmt.Errorf("RateLimit-Policy %q: %v", n, err)
		}
		out[n] = f
	}
	seen := 0
	for _, m := range lim {
		it, n, err := name(m)
		if err != nil {
			return nil, fmt.Errorf("RateLimit: %v", err)
		}
		f, ok := out[n]
		if !ok {
			return nil, fmt.Errorf("RateLimit names %q, which RateLimit-Policy does not", n)
		}
		if f.r, err = param(it, "r"); err != nil {
			return nil, fmt.Errorf("RateLimit %q: %v", n, err)
		}
		if f.t, err = param(it, "t"); err != nil {
			return nil, fmt.Errorf("RateLimit %q: %v", n, err)
		}
		out[n] = f
		seen++
	}
	if seen != len(out) {
		return nil, fmt.Errorf("RateLimit reports %d groups, RateLimit-Policy %d", seen, len(out))
	}
	return out, nil
}

// groupOf returns the fields of group, which must be the only group the
// response reports, with w=60, 0 <= r <= q and 1 <= t <= 60.
func groupOf(t *testing.T, r call, group string) fieldsOf {
	t.Helper()
	all, err := rateLimits(r.Header)
	if err != nil {
		t.Fatalf("%v\nresponse: %v", err, r.Response)
	}
	f, ok := all[group]
	if !ok || len(all) != 1 {
		t.Fatalf("rate-limit fields report %v, want exactly group %q\nresponse: %v", all, group, r.Response)
	}
	if f.w != 60 || f.r < 0 || f.r > f.q || f.t < 1 || f.t > 60 {
		t.Fatalf("group %q: q=%d w=%d r=%d t=%d out of range\nresponse: %v", group, f.q, f.w, f.r, f.t, r.Response)
	}
	return f
}

// expect checks a response's status and its group's quota and remaining.
func expect(t *testing.T, r call, status int, group string, q, remaining int64) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d\nresponse: %v", r.Status, status, r.Response)
	}
	f := groupOf(t, r, group)
	if f.q != q || f.r != remaining {
		t.Fatalf("group %q: q=%d r=%d, want q=%d r=%d\nresponse: %v", group, f.q, f.r, q, remaining, r.Response)
	}
}

// noLimits checks that a response carries no rate-limit fields.
func noLimits(t *testing.T, r call) {
	t.Helper()
	for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		if v := r.Header.Values(h); len(v) > 0 {
			t.Fatalf("%s: %q on a response that no budget evaluated\nresponse: %v", h, v, r.Response)
		}
	}
}

// failedOpen checks a response let through while the store was down: the
// group's policy is still announced (its quota is known), but there is no
// RateLimit field (its count is not) and no Retry-After.
func failedOpen(t *testing.T, r call, group string, q int64) {
	t.Helper()
	for _, h := range []string{"RateLimit", "Retry-After"} {
		if v := r.Header.Values(h); len(v) > 0 {
			t.Fatalf("%s: %q on a response whose budget failed open\nresponse: %v", h, v, r.Response)
		}
	}
	want := fmt.Sprintf("%q;q=%d;w=60", group, q)
	if v := r.Header.Values("RateLimit-Policy"); len(v) != 1 || v[0] != want {
		t.Fatalf("RateLimit-Policy %q on a failed-open response, want %q\nresponse: %v", v, want, r.Response)
	}
}

// denied checks a rate-limited response of group (quota q) against the
// contract and returns its Retry-After: 429; Retry-After in whole seconds,
// not earlier than the group's t nor than the end of the window the
// request was sent in; RateLimit r=0; Cache-Control: no-store; a JSON body
// {"error":{"type":"rate_limit_error","code":"E01003","name":"RateLimited","message":"…"}};
// no Idempotent-Replayed.
func denied(t *testing.T, r call, group string, q int64) time.Duration {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429\nresponse: %v", r.Status, r.Response)
	}
	f := groupOf(t, r, group)
	if f.q != q || f.r != 0 {
		t.Fatalf("429 reports q=%d r=%d for %q, want q=%d r=0\nresponse: %v", f.q, f.r, group, q, r.Response)
	}
	ra, err := strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
	if err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q is not 1 to 60 seconds\nresponse: %v", r.Header.Get("Retry-After"), r.Response)
	}
	if ra < f.t {
		t.Fatalf("Retry-After %d is earlier than t=%d", ra, f.t)
	}
	retry := time.Duration(ra) * time.Second
	if end := e2e.WindowAt(r.sent, time.Minute).End; r.recv.Add(retry).Before(end) {
		t.Fatalf("Retry-After %ds points %v before the window resets", ra, end.Sub(r.recv.Add(retry)))
	}
	for h, want := range map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"} {
		if got := r.Header.Get(h); !strings.HasPrefix(got, want) {
			t.Fatalf("%s: %q, want %q", h, got, want)
		}
	}
	if v := r.Header.Get("Idempotent-Replayed"); v != "" {
		t.Fatalf("a 429 carries Idempotent-Replayed: %q", v)
	}
	const prefix = `{"error":{"type":"rate_limit_error","code":"E01003","name":"RateLimited","message":"`
	var body map[string]map[string]string
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body) != 1 || len(body["error"]) != 4 ||
		body["error"]["message"] == "" || !strings.HasPrefix(string(r.Body), prefix) || !strings.HasSuffix(string(r.Body), `"}}`) {
		t.Fatalf("429 body %s, want %s…\"}}", r.Body, prefix)
	}
	return retry
}

// errorKind returns "type/code" of an error body.
func errorKind(b []byte) string {
	var body struct {
		Error struct {
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &body)
	return body.Error.Type + "/" + body.Error.Code
}

// messageID returns the "id" of a send's response.
func messageID(t *testing.T, r call) string {
	t.Helper()
	var body struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || !strings.HasPrefix(body.ID, "msg_") {
		t.Fatalf("no message id in %v", r.Response)
	}
	return body.ID
}

// load is a batch of concurrent requests spread over several clients.
type load struct {
	method, path, body string
	header             func(i int) []string
}

// spread sends n requests of l from workers goroutines, request i through
// clients[i%len(clients)], and returns every response. It fails the test
// on a transport error.
func spread(t *testing.T, clients []*e2e.Client, n, workers int, l load) []*e2e.Response {
	t.Helper()
	var (
		mu   sync.Mutex
		out  []*e2e.Response
		errs []error
		wg   sync.WaitGroup
		next = make(chan int, n)
	)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var h []string
				if l.header != nil {
					h = l.header(i)
				}
				r, err := clients[i%len(clients)].Send(l.method, l.path, l.body, h...)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					out = append(out, r)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed, the first: %v", len(errs), errs[0])
	}
	return out
}

// admitted checks that exactly quota of rs were admitted and the rest
// denied with 429, and that the admitted ones saw every remaining count
// from quota-1 down to 0 exactly once: each unit of the budget was handed
// out once, whichever instance served the request.
func admitted(t *testing.T, rs []*e2e.Response, group string, ok int, quota int64) {
	t.Helper()
	var rems []int64
	denials := 0
	for _, r := range rs {
		f, err := rateLimits(r.Header)
		if err != nil {
			t.Fatalf("%v\nresponse: %v", err, r)
		}
		g, found := f[group]
		if !found {
			t.Fatalf("no %q fields: %v", group, r)
		}
		switch r.Status {
		case ok:
			rems = append(rems, g.r)
		case http.StatusTooManyRequests:
			denials++
			if g.r != 0 {
				t.Fatalf("429 with r=%d: %v", g.r, r)
			}
		default:
			t.Fatalf("status %d: %v", r.Status, r)
		}
	}
	if int64(len(rems)) != quota || len(rems)+denials != len(rs) {
		t.Fatalf("%s: %d admitted and %d denied of %d, want exactly %d admitted", group, len(rems), denials, len(rs), quota)
	}
	slices.Sort(rems)
	for i, r := range rems {
		if r != int64(i) {
			t.Fatalf("%s: remaining counts seen by admitted requests %v, want 0..%d once each", group, rems, quota-1)
		}
	}
}
