package fastreq

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/valyala/fasthttp"
)

// The timeouts Harden gives a server that has none, those of a net/http
// server configured as the README shows.
const (
	// DefaultReadTimeout bounds reading a request, header and body
	// (fasthttp has no separate header timeout).
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds writing an answer, counted by fasthttp
	// from the handler's return.
	DefaultWriteTimeout = 20 * time.Second
	// DefaultIdleTimeout bounds the wait for a kept-alive connection's
	// next request.
	DefaultIdleTimeout = time.Minute
)

// hardened holds the servers Harden has changed, so that a second call
// (an app served on two listeners) changes nothing while the first
// serves. An entry goes when its server is collected.
var hardened struct {
	sync.Mutex
	m map[weak.Pointer[fasthttp.Server]]struct{}
}

// Harden makes srv, a Fiber app's server, answer slow and silent clients
// as net/http does, before it serves:
//
//   - a ReadTimeout or WriteTimeout of 0 (none) becomes DefaultReadTimeout
//     or DefaultWriteTimeout, and an IdleTimeout of 0 DefaultIdleTimeout
//     when ReadTimeout was 0 too (fasthttp, like net/http, bounds an idle
//     connection by ReadTimeout when IdleTimeout is 0);
//   - an error answer (408 to a request that did not arrive in time, 431
//     to a header larger than ReadBufferSize) is written under a write
//     deadline of srv's WriteTimeout from the moment it is written.
//     fasthttp alone writes it under the deadline set before the
//     connection's previous answer, which on a kept-alive connection has
//     often passed: the client then gets no answer, only a closed
//     connection.
//
// srv's ErrorHandler still writes the answer (fasthttp's default when it
// has none). Harden changes a server once; later calls do nothing, so
// they may come while it serves.
func Harden(srv *fasthttp.Server) {
	wp := weak.Make(srv)
	hardened.Lock()
	defer hardened.Unlock()
	if _, ok := hardened.m[wp]; ok {
		return
	}
	if hardened.m == nil {
		hardened.m = make(map[weak.Pointer[fasthttp.Server]]struct{})
	}
	hardened.m[wp] = struct{}{}
	runtime.AddCleanup(srv, func(wp weak.Pointer[fasthttp.Server]) {
		hardened.Lock()
		delete(hardened.m, wp)
		hardened.Unlock()
	}, wp)

	if srv.IdleTimeout == 0 && srv.ReadTimeout == 0 {
		srv.IdleTimeout = DefaultIdleTimeout
	}
	if srv.ReadTimeout == 0 {
		srv.ReadTimeout = DefaultReadTimeout
	}
	if srv.WriteTimeout == 0 {
		srv.WriteTimeout = DefaultWriteTimeout
	}
	next := srv.ErrorHandler
	if next == nil {
		next = defaultErrorHandler
	}
	write := srv.WriteTimeout
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		if c := ctx.Conn(); c != nil {
			_ = c.SetWriteDeadline(time.Now().Add(write))
		}
		next(ctx, err)
	}
}

// defaultErrorHandler is fasthttp's (unexported) default error handler.
func defaultErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne *net.OpError
	switch {
	case errors.As(err, &small):
		ctx.Error("Too big request header", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("Request timeout", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("Error when parsing request", fasthttp.StatusBadRequest)
	}
}

// Bounds of a lingering close: together they cap what one connection can
// cost after its last answer, whatever the client does.
const (
	// LingerTimeout bounds how long a closed connection keeps reading
	// what the client still sends: long enough for the rest of a request
	// in flight, and for the client to read the answer and close its end.
	// (net/http waits 500 ms, without reading.)
	LingerTimeout = 2 * time.Second
	// LingerBytes bounds what a closed connection reads and discards; a
	// client sending more is reset. As much as net/http reads of a body
	// its handler left unread.
	LingerBytes = 256 << 10
	// MaxLingering bounds the connections lingering at once; beyond it a
	// connection is closed at once, as fasthttp alone would.
	MaxLingering = 1024
)

// Linger returns ln, whose connections close gracefully: Close sends FIN
// after everything written (the client reads the answer to its end), then,
// on another goroutine, reads and discards what the client still sends
// until it closes its end, LingerTimeout passes or LingerBytes have been
// read, and only then closes the socket. A socket closed with unread input
// makes the kernel send a reset, which reaches a client still writing its
// request (the rest of a header fasthttp answered 431, a slowloris
// header answered 408) before it reads the answer; this reset is what the
// lingering avoids. Close returns at once (fasthttp's worker is free
// again), and returns nil unless the connection could not be half-closed.
//
// Connections that cannot be half-closed (no CloseWrite) are returned as
// they are. The listener's Close may be called more than once, and
// concurrently: the first closes ln, the others return what it returned.
func Linger(ln net.Listener) net.Listener { return linger(ln, MaxLingering) }

// linger is Linger with at most max connections lingering at once.
func linger(ln net.Listener, max int) net.Listener {
	return &lingerListener{Listener: ln, slots: make(chan struct{}, max)}
}

type lingerListener struct {
	net.Listener
	slots chan struct{} // one per lingering connection

	closeOnce sync.Once
	closeErr  error // of the first Close
}

// Close closes the listener once; fasthttp's Shutdown and a shutdown hook
// may both close it.
func (l *lingerListener) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.Listener.Close() })
	return l.closeErr
}

// closeWriter is a connection that can be half-closed (*net.TCPConn).
type closeWriter interface {
	CloseWrite() error
}

func (l *lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cw, ok := c.(closeWriter)
	if !ok {
		return c, nil
	}
	return &lingerConn{Conn: c, cw: cw, slots: l.slots}, nil
}

type lingerConn struct {
	net.Conn
	cw    closeWriter
	slots chan struct{}

	once sync.Once
	err  error // of Close, set once
}

// Close may be called more than once, and concurrently (fasthttp closes an
// idle connection at shutdown while its worker may be closing it too).
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		select {
		case c.slots <- struct{}{}:
		default:
			c.err = c.Conn.Close()
			return
		}
		if err := c.cw.CloseWrite(); err != nil {
			<-c.slots
			_ = c.Conn.Close()
			c.err = err
			return
		}
		go c.drain()
	})
	return c.err
}

// drain discards the client's input until it ends, then closes the
// socket: with nothing unread, the close sends no reset.
func (c *lingerConn) drain() {
	defer func() { <-c.slots }()
	_ = c.Conn.SetReadDeadline(time.Now().Add(LingerTimeout))
	_, _ = io.CopyN(io.Discard, c.Conn, LingerBytes)
	_ = c.Conn.Close()
}
