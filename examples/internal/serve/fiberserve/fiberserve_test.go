package fiberserve

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
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

// TestErrorDeadline: on a kept-alive connection, a request whose body
// never arrives after the connection's previous answer's write deadline
// has passed gets its 408 with ErrorDeadline, and nothing without it.
func TestErrorDeadline(t *testing.T) {
	for _, withDeadline := range []bool{true, false} {
		name := map[bool]string{true: "with", false: "without"}[withDeadline]
		t.Run(name, func(t *testing.T) {
			app := fiber.New(fiber.Config{
				DisableStartupMessage: true,
				ReadTimeout:           300 * time.Millisecond,
				WriteTimeout:          200 * time.Millisecond,
				IdleTimeout:           10 * time.Second,
			})
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			app.Post("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			if withDeadline {
				ErrorDeadline(app.Server())
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = app.Listener(ln) }()
			defer func() { _ = app.Shutdown() }()

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(c)
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: example\r\n\r\n")
			if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200 ") {
				t.Fatalf("first request: %q, %v", line, err)
			}
			for { // the rest of the first answer
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if line == "\r\n" {
					break
				}
			}
			_, _ = r.Discard(len("ok"))
			time.Sleep(500 * time.Millisecond) // past the first answer's write deadline
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: example\r\nContent-Length: 100\r\n\r\n")
			line, err := r.ReadString('\n')
			switch {
			case withDeadline && (err != nil || !strings.HasPrefix(line, "HTTP/1.1 408 ")):
				t.Fatalf("second request: %q, %v; want a 408", line, err)
			case !withDeadline && err == nil:
				t.Fatalf("second request: %q without ErrorDeadline: fasthttp now answers it, and ErrorDeadline may be unneeded", line)
			}
		})
	}
}
