// Package hostile runs every example that serves HTTP (the quickstarts,
// the Send API and Tenant API commands on each router, and tiers) and
// sends each requests that a careless server drops or holds, many times
// over: every one must be answered with an HTTP status, never a reset
// connection or a hang.
package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
	"github.com/quotagate/quotagate/examples/internal/routers"
	"github.com/quotagate/quotagate/examples/internal/serve"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

// The examples' servers' timeouts.
const (
	readTimeout  = serve.ReadTimeout
	writeTimeout = serve.WriteTimeout
)

// tries is how many times each request is sent: a server that drops an
// answer does so in some tries only, as goroutines race its deadlines or
// the client's reads race its resets.
const tries = 10

// server is one example command and the requests that reach a route of
// it that reads a body.
type server struct {
	name string
	pkg  string // the main package, relative to this directory
	// start starts the binary bin.
	start func(t *testing.T, bin string) *e2e.Process
	// bodyRoute is the request line of a route that takes a body,
	// getRoute that of a route that does not, and header the fields both
	// need (credentials).
	bodyRoute, getRoute string
	header              []string
	// bodyStatus are the statuses a request to bodyRoute whose body never
	// arrives may get; headerStatus, those of a request with 24 KiB of
	// header.
	bodyStatus, headerStatus []int
}

// startDefault starts an example with the -addr flag and the listening
// line, with the example's own environment variables unset.
func startDefault(unset ...string) func(t *testing.T, bin string) *e2e.Process {
	return func(t *testing.T, bin string) *e2e.Process {
		return e2e.Start(t, bin, e2e.Config{Unset: unset})
	}
}

// startTiers starts examples/tiers as its doc says: in a directory holding
// its policy.yaml, with ADDR. It prints no listening line, and SIGTERM
// ends it as the Go runtime does by default, so it is killed at the end.
func startTiers(t *testing.T, bin string) *e2e.Process {
	doc, err := os.ReadFile("../../tiers/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := e2e.FreeAddr(t)
	p := e2e.Start(t, bin, e2e.Config{Dir: dir, Addr: addr, Env: []string{"ADDR=" + addr}})
	t.Cleanup(p.Kill) // before Start's cleanup, which would want exit status 0
	return p
}

var (
	sendapiEnv   = []string{"SENDAPI_KEY_SECRET", "TRUSTED_PROXIES", "IDEMPOTENCY_TTL", "REDIS_TIMEOUT"}
	tenantapiEnv = []string{"PUBLIC_RATE_LIMIT", "PUBLIC_RATE_WINDOW", "PORTAL_ZEROLOGIN_RATE_LIMIT", "TRUSTED_PROXIES"}
)

// servers are every example that serves HTTP. examples/adaptive,
// examples/scaled and examples/pictures serve only themselves, on a
// loopback port they do not print, for the few seconds of a measurement
// (with serve.HTTPServer).
var servers = func() []server {
	var all []server
	for _, name := range routers.Quickstarts {
		all = append(all, server{
			name:      name,
			pkg:       "../../" + name,
			start:     startDefault(),
			bodyRoute: "POST /items",
			getRoute:  "GET /hello",
			// The handler does not read the body: net/http answers it
			// once its own attempt to read the rest of the body before
			// answering (to keep the connection) times out.
			bodyStatus:   []int{201},
			headerStatus: []int{431},
		})
	}
	for _, router := range commands("../../sendapi") {
		all = append(all, server{
			name:         "sendapi/" + router,
			pkg:          "../../sendapi/" + router,
			start:        startDefault(sendapiEnv...),
			bodyRoute:    "POST /v1/email/messages",
			getRoute:     "GET /v1/webhooks",
			header:       []string{"Authorization", "AccessKey ak_acme_1", "Content-Type", "application/json"},
			bodyStatus:   []int{400}, // the handler's read failed
			headerStatus: []int{431},
		})
	}
	for _, router := range commands("../../tenantapi") {
		all = append(all, server{
			name:         "tenantapi/" + router,
			pkg:          "../../tenantapi/" + router,
			start:        startDefault(tenantapiEnv...),
			bodyRoute:    "POST /api/users/bulk-disable",
			getRoute:     "GET /api/users",
			header:       []string{"Authorization", "Bearer op-acme-alice", "Content-Type", "application/json"},
			bodyStatus:   []int{400}, // the handler's read failed
			headerStatus: []int{431},
		})
	}
	for i := range all {
		if strings.HasPrefix(path.Base(all[i].pkg), "fiber") {
			// fasthttp reads the body before any handler runs, and
			// answers 408 when it does not arrive.
			all[i].bodyStatus = []int{408}
		}
	}
	return append(all, server{
		name:      "tiers",
		pkg:       "../../tiers",
		start:     startTiers,
		bodyRoute: "POST /", // its one route is GET /: Echo answers 405
		getRoute:  "GET /",
		header:    []string{"X-Tenant", "acme"},
		// net/http's default header limit is 1 MiB: the request is
		// served, and its budget has no tenant to count it for.
		bodyStatus:   []int{405},
		headerStatus: []int{400},
	})
}()

// commands returns the subdirectories of dir that hold a command (a
// main.go): an example's command on each router.
func commands(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		panic(err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "main.go")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	return names
}

// request is the request line (route) with s's header fields, kept alive,
// announcing a body of length bytes when length > 0 and sending none.
func request(s server, route string, length int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s HTTP/1.1\r\nHost: example\r\n", route)
	for i := 0; i+1 < len(s.header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", s.header[i], s.header[i+1])
	}
	if length > 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", length)
	}
	b.WriteString("\r\n")
	return b.String()
}

// bodyNeverArrives is a request to s's bodyRoute announcing a 100-byte
// body and sending none. It keeps the connection alive, as clients do:
// net/http, before it answers a handler that did not read the body, tries
// to read the rest so the connection can serve the next request.
func bodyNeverArrives(s server) string { return request(s, s.bodyRoute, 100) }

// forwardingHeaders is a GET with 8 KiB each of X-Forwarded-For,
// Forwarded and X-Real-IP: 24 KiB, beyond the 16 KiB of header the
// examples read.
func forwardingHeaders() string {
	fill := func(first, each string) string {
		var b strings.Builder
		b.WriteString(first)
		for b.Len() < 8<<10 {
			b.WriteString(each)
		}
		return b.String()[:8<<10]
	}
	return e2e.RawRequest("GET", "/", "",
		"X-Forwarded-For", fill("203.0.113.7", ", 198.51.100.23"),
		"Forwarded", fill("for=203.0.113.7;proto=https", `, for="[2001:db8::17]:4711";by=198.51.100.1`),
		"X-Real-IP", fill("203.0.113.7", " 203.0.113.7"))
}

// TestEveryServerAnswersBadInput sends every example server, tries times
// each, requests whose answer a server with careless timeouts, or one that
// closes its connections abruptly, fails to deliver:
//
//   - a request whose body never arrives, on a new connection and as the
//     second request of a kept-alive connection (after a pause longer than
//     WriteTimeout-ReadTimeout, so that a write deadline left over from
//     the first answer has passed): answered, after the read timeout;
//   - a request with 24 KiB of forwarding headers, written whole before
//     the answer is read, in one write and in 4 KiB writes a millisecond
//     apart (a client on a real network): answered 431 (400 by tiers,
//     which reads 1 MiB of header, for the tenant it lacks), and no write
//     fails because the server reset the connection.
//
// Every try must be answered with a status line. The servers run at once,
// and so do the tries of each case, so the test takes about one pause and
// one read timeout.
func TestEveryServerAnswersBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every example server and waits for their read timeout")
	}
	pkgs := make([]string, len(servers))
	for i, s := range servers {
		pkgs[i] = s.pkg
	}
	bins := e2e.BuildAll(t, pkgs...)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// t.Run from goroutines rather than t.Parallel, which would run
			// only GOMAXPROCS servers at a time; they mostly wait.
			t.Run(s.name, func(t *testing.T) {
				p := s.start(t, bins[i])
				defer func() {
					if t.Failed() {
						t.Logf("stderr of %s at %s:\n%s", s.name, p.Addr, p.Stderr())
					}
				}()
				oneWrite := e2e.RawOptions{WriteFirst: true}
				inPieces := e2e.RawOptions{WriteFirst: true, Segment: 4 << 10, Pause: time.Millisecond}
				cases := []struct {
					name  string
					check func(t *testing.T)
				}{
					{"body never arrives", func(t *testing.T) { checkBodyNeverArrives(t, p, s) }},
					{"body never arrives on a kept-alive connection", func(t *testing.T) { checkBodyNeverArrivesKeptAlive(t, p, s) }},
					{"forwarding headers in one write", func(t *testing.T) { checkForwardingHeaders(t, p, s, "in one write", oneWrite) }},
					{"forwarding headers in 4 KiB writes", func(t *testing.T) { checkForwardingHeaders(t, p, s, "in 4 KiB writes", inPieces) }},
				}
				var running sync.WaitGroup
				for _, c := range cases {
					running.Add(1)
					go func() {
						defer running.Done()
						t.Run(c.name, c.check)
					}()
				}
				running.Wait()
			})
		}()
	}
	wg.Wait()
}

// from is the source address of try i of a case: each try is its own
// client, so that per-client budgets are not spent. The cases' ranges do
// not overlap.
func from(caseNo, i int) string { return fmt.Sprintf("127.0.%d.%d", caseNo, 10+i) }

// concurrentTries runs try tries times at once and reports how many
// were answered.
func concurrentTries(t *testing.T, what string, try func(i int) (string, bool)) {
	results := make([]string, tries)
	answered := make([]bool, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], answered[i] = try(i)
		}()
	}
	wg.Wait()
	report(t, what, answered, results)
}

// checkBodyNeverArrives sends bodyNeverArrives, each try on a new
// connection, and wants every one answered with one of s.bodyStatus, no
// sooner than the read timeout.
func checkBodyNeverArrives(t *testing.T, p *e2e.Process, s server) {
	concurrentTries(t, s.name+": body never arrives", func(i int) (string, bool) {
		res, err := p.RawWith(bodyNeverArrives(s), readTimeout+30*time.Second, e2e.RawOptions{From: from(1, i)})
		if err != nil {
			return err.Error(), false
		}
		return answer(s.bodyStatus, res.Line, res.Status, res.After)
	})
}

// keptAlivePause is how long a kept-alive client waits between its two
// requests: longer than WriteTimeout-ReadTimeout, so that a write deadline
// set for the first answer has passed when the second is due.
const keptAlivePause = writeTimeout - readTimeout + time.Second

// checkBodyNeverArrivesKeptAlive sends, on each try's connection, a GET
// to s.getRoute, reads its answer, waits keptAlivePause, then sends
// bodyNeverArrives and wants it answered as checkBodyNeverArrives does.
func checkBodyNeverArrivesKeptAlive(t *testing.T, p *e2e.Process, s server) {
	concurrentTries(t, s.name+": body never arrives on a kept-alive connection", func(i int) (string, bool) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from(2, i))}}
		c, err := d.Dial("tcp", p.Addr)
		if err != nil {
			return err.Error(), false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(keptAlivePause + readTimeout + 30*time.Second))
		r := bufio.NewReader(c)
		if _, err := io.WriteString(c, request(s, s.getRoute, 0)); err != nil {
			return "first request: " + err.Error(), false
		}
		first, err := http.ReadResponse(r, nil)
		if err != nil {
			return "first request: " + err.Error(), false
		}
		_, err = io.Copy(io.Discard, first.Body)
		first.Body.Close()
		if err != nil || first.Close {
			return fmt.Sprintf("first request: %s, closing %v, %v", first.Status, first.Close, err), false
		}
		time.Sleep(keptAlivePause)
		start := time.Now()
		if _, err := io.WriteString(c, bodyNeverArrives(s)); err != nil {
			return "second request: " + err.Error(), false
		}
		line, err := r.ReadString('\n')
		after := time.Since(start)
		if err != nil {
			return fmt.Sprintf("second request: no status line after %v (read %q): %v", after.Round(time.Millisecond), line, err), false
		}
		line = strings.TrimRight(line, "\r\n")
		var status int
		if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &status); err != nil {
			return fmt.Sprintf("second request: %q is not a status line", line), false
		}
		return answer(s.bodyStatus, line, status, after)
	})
}

// answer describes the answer to a request whose body never arrived, and
// reports whether it is one of want, given no sooner than the read
// timeout.
func answer(want []int, line string, status int, after time.Duration) (string, bool) {
	switch {
	case !slices.Contains(want, status):
		return fmt.Sprintf("%q, want status %v", line, want), false
	case after < readTimeout-time.Second:
		return fmt.Sprintf("%q after %v, before the read timeout (%v)", line, after.Round(time.Millisecond), readTimeout), false
	}
	return fmt.Sprintf("%q after %v", line, after.Round(time.Millisecond)), true
}

// checkForwardingHeaders sends forwardingHeaders tries times, one try
// after the other, each written whole before the answer is read, as o
// (described by how) says.
func checkForwardingHeaders(t *testing.T, p *e2e.Process, s server, how string, o e2e.RawOptions) {
	req := forwardingHeaders()
	results := make([]string, tries)
	answered := make([]bool, tries)
	for i := range tries {
		res, err := p.RawWith(req, 30*time.Second, o)
		switch {
		case err != nil:
			results[i] = err.Error()
		case !slices.Contains(s.headerStatus, res.Status):
			results[i] = fmt.Sprintf("%q, want status %v", res.Line, s.headerStatus)
		default:
			results[i] = fmt.Sprintf("%q", res.Line)
			answered[i] = true
		}
	}
	report(t, s.name+": 24 KiB of forwarding headers "+how, answered, results)
}

// report fails t unless every try was answered as wanted, and lists the
// tries.
func report(t *testing.T, what string, answered []bool, results []string) {
	n := 0
	var b strings.Builder
	for i, r := range results {
		if answered[i] {
			n++
		}
		fmt.Fprintf(&b, "\n\ttry %d: %s", i+1, r)
	}
	if n != len(results) {
		t.Errorf("%s: %d of %d answered:%s", what, n, len(results), b.String())
	} else {
		t.Logf("%s: %d of %d answered:%s", what, n, len(results), b.String())
	}
}
