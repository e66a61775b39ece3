package fastreq

import (
	"bufio"
	"cmp"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestLingerLetsTheClientReadTheAnswer plays fasthttp answering 431 to a
// header larger than its 16 KiB buffer: the server reads 16 KiB, answers
// and closes, while the client is still sending the rest of its 24 KiB in
// 4 KiB writes. Every write must succeed and the answer be read.
func TestLingerLetsTheClientReadTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lln := Linger(ln)
	defer lln.Close()
	go func() {
		for {
			c, err := lln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.ReadFull(c, make([]byte, 16<<10))
				_, _ = io.WriteString(c, "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				_ = c.Close()
			}()
		}
	}()
	request := []byte(strings.Repeat("x", 24<<10))
	for i := range 10 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		for off := 0; off < len(request); off += 4 << 10 {
			if _, err := c.Write(request[off : off+4<<10]); err != nil {
				t.Fatalf("try %d: write at %d: %v", i+1, off, err)
			}
			time.Sleep(time.Millisecond)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 431 ") {
			t.Fatalf("try %d: read %q, %v", i+1, line, err)
		}
		c.Close()
	}
}

// pipe returns a lingering connection on one end of a synchronous pipe,
// the client's end, and how many times it was half-closed.
func pipe(slots chan struct{}) (*lingerConn, net.Conn, *atomic.Int32) {
	server, client := net.Pipe()
	var halfClosed atomic.Int32
	c := &lingerConn{Conn: server, cw: closeWriterFunc(func() error { halfClosed.Add(1); return nil }), slots: slots}
	return c, client, &halfClosed
}

type closeWriterFunc func() error

func (f closeWriterFunc) CloseWrite() error { return f() }

// TestLingerBounds: a client that keeps sending is cut off after
// LingerBytes, one that neither sends nor closes after LingerTimeout, and
// beyond the cap a connection closes at once.
func TestLingerBounds(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		c, client, halfClosed := pipe(make(chan struct{}, 1))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		n, err := client.Write(make([]byte, 4*LingerBytes))
		if n != LingerBytes || !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("the client wrote %d bytes (%v), want %d then a closed connection", n, err, LingerBytes)
		}
		if halfClosed.Load() != 1 {
			t.Fatalf("half-closed %d times, want 1", halfClosed.Load())
		}
	})
	t.Run("time", func(t *testing.T) {
		c, client, _ := pipe(make(chan struct{}, 1))
		start := time.Now()
		_ = c.Close()
		_ = client.SetReadDeadline(start.Add(LingerTimeout + 30*time.Second))
		_, err := client.Read(make([]byte, 1))
		if elapsed := time.Since(start); !errors.Is(err, io.EOF) || elapsed < LingerTimeout-100*time.Millisecond {
			t.Fatalf("read %v after %v, want the connection closed after LingerTimeout (%v)", err, elapsed, LingerTimeout)
		}
	})
	t.Run("cap", func(t *testing.T) {
		slots := make(chan struct{}, 1)
		first, firstClient, _ := pipe(slots)
		defer firstClient.Close()
		_ = first.Close() // lingers: its client neither sends nor closes
		second, secondClient, halfClosed := pipe(slots)
		_ = second.Close()
		_ = secondClient.SetReadDeadline(time.Now().Add(LingerTimeout / 2))
		if _, err := secondClient.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("beyond the cap: read %v, want the connection closed at once", err)
		}
		if halfClosed.Load() != 0 {
			t.Fatal("beyond the cap, the connection lingered")
		}
	})
	t.Run("close twice", func(t *testing.T) {
		c, client, halfClosed := pipe(make(chan struct{}, 1))
		defer client.Close()
		done := make(chan struct{})
		go func() { _ = c.Close(); close(done) }()
		_ = c.Close()
		<-done
		if halfClosed.Load() != 1 {
			t.Fatalf("half-closed %d times, want 1", halfClosed.Load())
		}
	})
}

// TestHardenDefaults: a timeout the server has none of gets its default,
// one it has is kept, and an unset IdleTimeout stays unset when
// ReadTimeout bounds idle connections already.
func TestHardenDefaults(t *testing.T) {
	for _, c := range []struct {
		name     string
		in, want [3]time.Duration // read, write, idle
	}{
		{"none", [3]time.Duration{}, [3]time.Duration{DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout}},
		{"read", [3]time.Duration{time.Second, 0, 0}, [3]time.Duration{time.Second, DefaultWriteTimeout, 0}},
		{"write", [3]time.Duration{0, time.Second, 0}, [3]time.Duration{DefaultReadTimeout, time.Second, DefaultIdleTimeout}},
		{"idle", [3]time.Duration{0, 0, time.Second}, [3]time.Duration{DefaultReadTimeout, DefaultWriteTimeout, time.Second}},
		{"all", [3]time.Duration{1, 2, 3}, [3]time.Duration{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &fasthttp.Server{ReadTimeout: c.in[0], WriteTimeout: c.in[1], IdleTimeout: c.in[2]}
			Harden(srv)
			if got := [3]time.Duration{srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout}; got != c.want {
				t.Fatalf("read, write, idle = %v, want %v", got, c.want)
			}
		})
	}
}

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(d time.Time) error { c.set = append(c.set, d); return nil }
func (c *deadlineConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *deadlineConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }

// TestHardenErrorDeadline: an error answer's write deadline is the
// server's own WriteTimeout from now, set once however often Harden ran,
// before the server's error handler writes it.
func TestHardenErrorDeadline(t *testing.T) {
	for _, write := range []time.Duration{0, 7 * time.Second} {
		var calls int
		srv := &fasthttp.Server{WriteTimeout: write, ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			calls++
			ctx.Error("x", fasthttp.StatusRequestTimeout)
		}}
		Harden(srv)
		Harden(srv)
		conn := &deadlineConn{}
		var ctx fasthttp.RequestCtx
		ctx.Init2(conn, nil, false)
		start := time.Now()
		srv.ErrorHandler(&ctx, errors.New("timeout"))
		want := cmp.Or(write, DefaultWriteTimeout)
		if calls != 1 || len(conn.set) != 1 || conn.set[0].Before(start.Add(want)) || conn.set[0].After(time.Now().Add(want)) {
			t.Fatalf("WriteTimeout %v: the error handler ran %d times, deadlines %v set at %v; want one, %v from then",
				write, calls, conn.set, start, want)
		}
	}
	// fasthttp's own error answers, for a server without an error handler.
	srv := &fasthttp.Server{}
	Harden(srv)
	for _, c := range []struct {
		err  error
		want int
	}{
		{&fasthttp.ErrSmallBuffer{}, fasthttp.StatusRequestHeaderFieldsTooLarge},
		{&net.OpError{Op: "read", Err: timeoutError{}}, fasthttp.StatusRequestTimeout},
		{errors.New("bad"), fasthttp.StatusBadRequest},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Init2(&deadlineConn{}, nil, false)
		srv.ErrorHandler(&ctx, c.err)
		if got := ctx.Response.StatusCode(); got != c.want {
			t.Errorf("%v: %d, want %d", c.err, got, c.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }

// TestErrorDeadlineKeptAlive: on a kept-alive connection, a request whose
// body never arrives after the connection's previous answer's write
// deadline has passed gets its 408 from a hardened server, and nothing
// from fasthttp alone (if fasthttp ever answers it by itself, the error
// deadline may be unneeded).
func TestErrorDeadlineKeptAlive(t *testing.T) {
	for _, hardened := range []bool{true, false} {
		t.Run(map[bool]string{true: "hardened", false: "fasthttp alone"}[hardened], func(t *testing.T) {
			srv := &fasthttp.Server{
				Handler:      func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") },
				ReadTimeout:  300 * time.Millisecond,
				WriteTimeout: 200 * time.Millisecond,
				IdleTimeout:  10 * time.Second,
			}
			if hardened {
				Harden(srv)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			defer func() { _ = srv.Shutdown() }()

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(c)
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: example\r\n\r\n")
			for { // the first answer's header
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if line == "\r\n" {
					break
				}
			}
			_, _ = r.Discard(len("ok"))
			time.Sleep(250 * time.Millisecond) // past the first answer's write deadline
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: example\r\nContent-Length: 100\r\n\r\n")
			line, err := r.ReadString('\n')
			switch {
			case hardened && (err != nil || !strings.HasPrefix(line, "HTTP/1.1 408 ")):
				t.Fatalf("second request: %q, %v; want a 408", line, err)
			case !hardened && err == nil:
				t.Fatalf("second request: %q from fasthttp alone: it now answers, and Harden's error deadline may be unneeded", line)
			}
		})
	}
}

// TestLingerCloseTwice: the listener's second Close (fasthttp's Shutdown
// and a shutdown hook both close it) returns what the first returned,
// where a net.Listener's second Close is an error.
func TestLingerCloseTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Linger(ln)
	if err := l.Close(); err != nil {
		t.Fatalf("first Close = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil as the first", err)
	}
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}
