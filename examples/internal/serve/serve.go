// Package serve holds what every example's HTTP server shares: how long a
// client may take to send a request, to read the answer and to come back
// on a kept-alive connection, how large a request header may be, and an
// *http.Server built with them. The Fiber examples give the same limits
// to Fiber's server (fasthttp) and serve it with fibermw.Serve or
// fiberv3.Serve, which add what fasthttp lacks to answer every request.
//
// Without these limits a client that sends its header or body slowly, or
// never, or never reads the answer, holds a connection and a goroutine for
// as long as it likes. With them, every request is answered with a status:
// a body that does not arrive in time gets an error answer (400 when the
// handler reads the body, otherwise the handler's own answer; 408 on
// Fiber), a header too large gets 431.
package serve

import (
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds reading a request's header, from the
	// connection's opening or, on a kept-alive connection, from the first
	// byte of the request. net/http only: fasthttp bounds the header with
	// ReadTimeout.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, header and body, counted
	// from the same moment. Past it, net/http fails the handler's body
	// read (the examples then answer 400), and fasthttp answers 408 itself.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds writing the answer. net/http counts it from the
	// end of the request's header, so it must leave room after ReadTimeout:
	// a request whose body never arrives is answered only once ReadTimeout
	// has passed (by the handler after its failed read, or, when the
	// handler did not read the body, after net/http's own attempt to read
	// the rest of it before answering), and a write deadline at or before
	// that moment drops the answer and closes the connection. fasthttp
	// counts it from the moment it starts writing (fibermw.Serve gives its
	// error answers a deadline of their own).
	WriteTimeout = ReadTimeout + 10*time.Second
	// IdleTimeout bounds how long a kept-alive connection waits for its
	// next request.
	IdleTimeout = time.Minute
	// MaxHeaderBytes bounds a request's header, request line included.
	// 16 KiB serves an 8 KiB Authorization (a long token) or a 10 KiB URL;
	// a larger header is answered 431. Fiber reads the header into a buffer
	// of this size (its ReadBufferSize), with the same effect.
	MaxHeaderBytes = 16 << 10
)

// HTTPServer returns an *http.Server for h with the timeouts and header
// limit above. Set Addr, or call Serve with a listener, to run it.
func HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}
