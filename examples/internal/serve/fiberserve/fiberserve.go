// Package fiberserve makes a Fiber app's server (fasthttp, Fiber v2 and v3
// alike) answer every request with a status, as net/http does, where
// fasthttp by itself may drop the answer:
//
//   - fasthttp writes an error answer (408 for a request that did not
//     arrive in time, 431 for a header larger than its read buffer) under
//     the write deadline it set for the connection's previous answer,
//     which on a kept-alive connection has often passed: [ErrorDeadline]
//     gives the error answer a deadline of its own;
//   - fasthttp closes a connection as soon as it has written an error
//     answer, with the rest of the request still unread, and the kernel
//     then resets the connection: a client still sending (the rest of a
//     large header) sees the reset, not the answer. [Linger] closes such
//     connections as net/http does: it sends the answer's end (FIN)
//     first, and reads what the client still sends, for a bounded time and
//     byte count, before the real close.
//
// A Fiber example uses both, with the timeouts of package serve:
//
//	app := fiber.New(fiber.Config{ReadTimeout: serve.ReadTimeout, ...})
//	fiberserve.ErrorDeadline(app.Server())
//	err := app.Listener(fiberserve.Linger(ln))
package fiberserve

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/quotagate/quotagate/examples/internal/serve"
)

// ErrorDeadline makes srv set a write deadline of serve.WriteTimeout from
// now before it writes an error answer. Without it fasthttp writes that
// answer under the deadline it set before the connection's previous
// answer (none on a connection's first request), so that a kept-alive
// client whose next request comes more than WriteTimeout-ReadTimeout later
// and never ends gets no 408, only a closed connection. srv's own error
// handler (a Fiber app's server has one, which answers through the app's
// ErrorHandler) still writes the answer; ErrorDeadline panics when there
// is none, since fasthttp's default is not exported. Call it once, before
// serving.
func ErrorDeadline(srv *fasthttp.Server) {
	next := srv.ErrorHandler
	if next == nil {
		panic("fiberserve: ErrorDeadline: the server has no ErrorHandler to call (a Fiber app's server has one)")
	}
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		_ = ctx.Conn().SetWriteDeadline(time.Now().Add(serve.WriteTimeout))
		next(ctx, err)
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
// request before it reads the answer; this reset is what the lingering
// avoids. Close returns at once (fasthttp's worker is free again), and
// returns nil unless the connection could not be half-closed.
//
// Connections that are not TCP (no CloseWrite) are returned as they are.
// Pass the result to a Fiber app's Listener method.
func Linger(ln net.Listener) net.Listener { return linger(ln, MaxLingering) }

// linger is Linger with at most max connections lingering at once.
func linger(ln net.Listener, max int) net.Listener {
	return &lingerListener{Listener: ln, slots: make(chan struct{}, max)}
}

type lingerListener struct {
	net.Listener
	slots chan struct{} // one per lingering connection
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
