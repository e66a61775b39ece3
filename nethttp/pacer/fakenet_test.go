package pacer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// An in-memory network for running a real httptest.Server and a real
// http.Transport inside a testing/synctest bubble. Loopback sockets cannot
// be used there: a goroutine blocked on socket I/O is not durably blocked,
// so fake time would never advance. Every blocking operation here is a
// channel operation on a channel created in the bubble, which is.

// clientMemListener is a net.Listener whose connections are in-memory
// pipes made by dial.
type clientMemListener struct {
	conns chan net.Conn
	done  chan struct{}
	lock  chan struct{}
	port  int
}

func newClientMemListener() *clientMemListener {
	l := &clientMemListener{conns: make(chan net.Conn), done: make(chan struct{}), lock: make(chan struct{}, 1), port: 40000}
	l.lock <- struct{}{}
	return l
}

func (l *clientMemListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *clientMemListener) Close() error {
	<-l.lock
	defer func() { l.lock <- struct{}{} }()
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *clientMemListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
}

func (l *clientMemListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	<-l.lock
	l.port++
	port := l.port
	l.lock <- struct{}{}
	a := &clientMemPipe{lock: make(chan struct{}, 1), wake: make(chan struct{})}
	b := &clientMemPipe{lock: make(chan struct{}, 1), wake: make(chan struct{})}
	a.lock <- struct{}{}
	b.lock <- struct{}{}
	srvAddr := l.Addr()
	cliAddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	cli := &clientMemConn{r: a, w: b, local: cliAddr, remote: srvAddr}
	srv := &clientMemConn{r: b, w: a, local: srvAddr, remote: cliAddr}
	select {
	case l.conns <- srv:
		return cli, nil
	case <-l.done:
		return nil, errors.New("connection refused")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// clientMemPipe is one direction of a connection: an unbounded buffer.
type clientMemPipe struct {
	lock     chan struct{} // holds a token while unlocked
	buf      []byte
	eof      bool          // the writer closed
	gone     bool          // the reader closed
	deadline time.Time     // read deadline
	timer    *time.Timer   // fires at deadline
	wake     chan struct{} // closed when anything changes
}

func (p *clientMemPipe) notify() {
	close(p.wake)
	p.wake = make(chan struct{})
}

type clientMemConn struct {
	r, w          *clientMemPipe
	local, remote net.Addr
}

func (c *clientMemConn) Read(b []byte) (int, error) {
	p := c.r
	for {
		<-p.lock
		switch {
		case p.gone:
			p.lock <- struct{}{}
			return 0, net.ErrClosed
		case len(p.buf) > 0:
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			p.lock <- struct{}{}
			return n, nil
		case p.eof:
			p.lock <- struct{}{}
			return 0, io.EOF
		case !p.deadline.IsZero() && !time.Now().Before(p.deadline):
			p.lock <- struct{}{}
			return 0, os.ErrDeadlineExceeded
		}
		wake := p.wake
		p.lock <- struct{}{}
		<-wake
	}
}

func (c *clientMemConn) Write(b []byte) (int, error) {
	p := c.w
	<-p.lock
	defer func() { p.lock <- struct{}{} }()
	if p.eof || p.gone {
		return 0, net.ErrClosed
	}
	p.buf = append(p.buf, b...)
	p.notify()
	return len(b), nil
}

func (c *clientMemConn) Close() error {
	<-c.w.lock
	c.w.eof = true
	c.w.notify()
	c.w.lock <- struct{}{}
	<-c.r.lock
	c.r.gone = true
	if c.r.timer != nil {
		c.r.timer.Stop()
	}
	c.r.notify()
	c.r.lock <- struct{}{}
	return nil
}

func (c *clientMemConn) LocalAddr() net.Addr  { return c.local }
func (c *clientMemConn) RemoteAddr() net.Addr { return c.remote }

func (c *clientMemConn) SetDeadline(t time.Time) error {
	return c.SetReadDeadline(t)
}

func (c *clientMemConn) SetWriteDeadline(time.Time) error { return nil } // writes never block

func (c *clientMemConn) SetReadDeadline(t time.Time) error {
	p := c.r
	<-p.lock
	defer func() { p.lock <- struct{}{} }()
	p.deadline = t
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if !t.IsZero() {
		if d := time.Until(t); d > 0 {
			p.timer = time.AfterFunc(d, func() {
				<-p.lock
				p.notify()
				p.lock <- struct{}{}
			})
		}
	}
	p.notify()
	return nil
}

// startClientMemServer starts h on a real httptest.Server that listens on
// the in-memory network, and returns it with an http.Transport that dials
// it. Call it inside a synctest bubble; both are closed when the test
// ends.
func startClientMemServer(t *testing.T, h http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	l := newClientMemListener()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	tr := &http.Transport{DialContext: l.dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv, tr
}
