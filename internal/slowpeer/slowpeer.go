// Package slowpeer plays slow and silent HTTP/1.1 clients against a server
// on real sockets, for the router adapters' tests, each of which checks
// the README's first limit on its router, served as the README shows
// (ServeHTTP, for a router built on net/http): a request whose body never
// arrives, a header sent a byte at a time (slowloris), a connection that
// sends nothing, a kept-alive connection left idle, and a kept-alive
// connection whose second request's body never arrives after a pause.
// Each must end within the server's timeouts, with an HTTP answer or a
// close, never a hang. A header larger than the server reads, sent in
// pieces, must be answered, not reset while the client still sends it.
package slowpeer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a server under test and what it was configured with. It
// serves GET / (any status) and POST / (the handler need not read the
// body).
type Server struct {
	// Addr is the server's address, host:port.
	Addr string
	// Read bounds reading a request, header and body (net/http's
	// ReadHeaderTimeout and ReadTimeout, fasthttp's ReadTimeout); Write
	// bounds writing an answer; Idle bounds the wait for a kept-alive
	// connection's next request.
	Read, Write, Idle time.Duration
	// BodyStatus is the answer to a POST whose body never arrives: 408
	// from fasthttp, which reads the body before the handler runs; the
	// handler's own status from net/http, when the handler does not read
	// the body.
	BodyStatus int
	// SlowHeaderResets says that a slowloris header may end in a reset
	// rather than a close: net/http closes a connection whose header
	// timed out without reading what the client still sends, and the
	// kernel resets it when a byte came in after the deadline. A server
	// that lingers (the Fiber adapters' Serve) never resets it.
	SlowHeaderResets bool
	// Margin is how much later than its timeout an end may come; 0 means
	// DefaultMargin. A loaded machine delays timers and the goroutines
	// that act on them.
	Margin time.Duration
}

// DefaultMargin is Server.Margin's default.
const DefaultMargin = 500 * time.Millisecond

// Check runs every case against s, at once, as subtests of t, and logs
// what each saw and when.
func Check(t *testing.T, s Server) {
	t.Helper()
	if s.Margin == 0 {
		s.Margin = DefaultMargin
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s Server)
	}{
		{"body never arrives", bodyNeverArrives},
		{"slowloris header", slowloris},
		{"silent connection", silent},
		{"idle kept-alive connection", idleKeptAlive},
		{"kept-alive, second body never arrives", secondBodyNeverArrives},
		{"large header in pieces", largeHeader},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() { t.Run(c.name, func(t *testing.T) { c.run(t, s) }) })
	}
	wg.Wait()
}

// dial connects to s with a deadline well past every bound checked, so
// that a server that holds the connection fails the check, not the test
// binary's timeout.
func dial(t *testing.T, s Server) net.Conn {
	c, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(s.Read + s.Write + s.Idle + 3*s.Margin + 5*time.Second))
	return c
}

// end is how a connection ended, seen from the client: the status line
// read (if any) and when, then how the connection ended and when.
type end struct {
	line   string        // the first line read, without CRLF; "" if none
	lineAt time.Duration // since the start, when line was read
	err    error         // what ended the read: io.EOF for a close
	at     time.Duration // since the start, when it ended
}

func (e end) String() string {
	var b strings.Builder
	if e.line != "" {
		fmt.Fprintf(&b, "%q after %v, then ", e.line, e.lineAt.Round(time.Millisecond))
	}
	what := "closed"
	switch {
	case e.err == nil:
		what = "still open"
	case isTimeout(e.err):
		what = "nothing more"
	case !errors.Is(e.err, io.EOF):
		what = e.err.Error()
	}
	fmt.Fprintf(&b, "%s after %v", what, e.at.Round(time.Millisecond))
	return b.String()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// await reads r until the connection ends, noting its first line; start
// is the moment the times are counted from.
func await(r *bufio.Reader, start time.Time) end {
	var e end
	line, err := r.ReadString('\n')
	if err == nil {
		e.line, e.lineAt = strings.TrimRight(line, "\r\n"), time.Since(start)
		_, err = io.Copy(io.Discard, r)
		if err == nil {
			err = io.EOF
		}
	}
	e.err, e.at = err, time.Since(start)
	return e
}

// status returns the status code of a status line, or 0.
func status(line string) int {
	var code int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &code); err != nil {
		return 0
	}
	return code
}

// wantAnswer fails t unless e answered s.BodyStatus and closed, both by
// bound.
func wantAnswer(t *testing.T, s Server, e end, bound time.Duration) {
	t.Helper()
	switch {
	case status(e.line) != s.BodyStatus:
		t.Errorf("%v; want status %d within %v", e, s.BodyStatus, bound)
	case e.lineAt > bound:
		t.Errorf("%v; want the answer within %v", e, bound)
	case !errors.Is(e.err, io.EOF) || e.at > bound:
		t.Errorf("%v; want the connection closed within %v", e, bound)
	default:
		t.Logf("%v (bound %v)", e, bound)
	}
}

// wantEnd fails t unless e ended by bound, with a status line or a close
// (or a reset, if reset).
func wantEnd(t *testing.T, e end, bound time.Duration, reset bool) {
	t.Helper()
	switch {
	case reset && e.line == "" && errors.Is(e.err, syscall.ECONNRESET) && e.at <= bound:
		t.Logf("%v (bound %v)", e, bound)
	case e.line != "" && status(e.line) == 0:
		t.Errorf("%v; want a status line or a close within %v", e, bound)
	case e.line != "" && e.lineAt <= bound:
		t.Logf("%v (bound %v)", e, bound)
	case !errors.Is(e.err, io.EOF) || e.at > bound:
		t.Errorf("%v; want a status line or a close within %v", e, bound)
	default:
		t.Logf("%v (bound %v)", e, bound)
	}
}

// post is a kept-alive POST / announcing a 100-byte body.
const post = "POST / HTTP/1.1\r\nHost: example\r\nContent-Length: 100\r\n\r\n"

// bodyNeverArrives sends a POST whose body never comes, on a new
// connection: it is answered s.BodyStatus and the connection closed,
// within the read timeout.
func bodyNeverArrives(t *testing.T, s Server) {
	c := dial(t, s)
	start := time.Now()
	if _, err := io.WriteString(c, post); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s, await(bufio.NewReader(c), start), s.Read+s.Margin)
}

// slowloris sends a header one byte every tenth of the read timeout,
// never ending it: the server answers or closes within the read timeout.
func slowloris(t *testing.T, s Server) {
	c := dial(t, s)
	start := time.Now()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: example\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(s.Read / 10)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	wantEnd(t, await(bufio.NewReader(c), start), s.Read+s.Margin, s.SlowHeaderResets)
}

// silent opens a connection and sends nothing: the server answers or
// closes within the read timeout.
func silent(t *testing.T, s Server) {
	c := dial(t, s)
	wantEnd(t, await(bufio.NewReader(c), time.Now()), s.Read+s.Margin, false)
}

// first sends GET / on c and reads its answer whole; the connection must
// stay open.
func first(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.Close {
		t.Fatalf("first request: %s, closing %v, %v", res.Status, res.Close, err)
	}
}

// idleKeptAlive sends a request, reads its answer, then sends nothing:
// the server closes the connection within the idle timeout.
func idleKeptAlive(t *testing.T, s Server) {
	c := dial(t, s)
	r := bufio.NewReader(c)
	first(t, c, r)
	wantEnd(t, await(r, time.Now()), s.Idle+s.Margin, false)
}

// secondBodyNeverArrives sends a request and reads its answer, pauses
// until the write deadline set for that answer has passed (and 100 ms
// more), then sends a POST whose body never comes: it is answered as on a
// new connection, within the read timeout.
func secondBodyNeverArrives(t *testing.T, s Server) {
	c := dial(t, s)
	r := bufio.NewReader(c)
	pause := max(s.Write-s.Read, 0) + 100*time.Millisecond
	if pause >= s.Idle {
		t.Fatalf("the pause past the first answer's write deadline, %v, would outlast the idle timeout, %v: lower Write", pause, s.Idle)
	}
	first(t, c, r)
	time.Sleep(pause)
	start := time.Now()
	if _, err := io.WriteString(c, post); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s, await(r, start), s.Read+s.Margin)
}

// largeHeader sends, ten times over, a GET with 24 KiB of header (more
// than fasthttp's 4 KiB default buffer) in 4 KiB writes a millisecond
// apart, as a client on a real network does, and reads the answer only
// then: every write must succeed and a status line come back. A server
// that closes a connection with the rest of the header unread makes the
// kernel reset it, and the client gets the reset instead of the answer.
func largeHeader(t *testing.T, s Server) {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: example\r\n")
	for i := 0; b.Len() < 24<<10; i++ {
		fmt.Fprintf(&b, "X-Filler-%d: %s\r\n", i, strings.Repeat("x", 100))
	}
	b.WriteString("\r\n")
	req := []byte(b.String())
	for try := range 10 {
		c := dial(t, s)
		for off := 0; off < len(req); off += 4 << 10 {
			if _, err := c.Write(req[off:min(off+4<<10, len(req))]); err != nil {
				t.Fatalf("try %d: write at %d: %v", try+1, off, err)
			}
			time.Sleep(time.Millisecond)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || status(line) == 0 {
			t.Fatalf("try %d: read %q, %v; want a status line", try+1, line, err)
		}
		if try == 0 {
			t.Logf("%q", strings.TrimRight(line, "\r\n"))
		}
		_ = c.Close()
	}
}
