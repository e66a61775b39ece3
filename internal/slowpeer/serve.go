package slowpeer

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// The timeouts of ServeHTTP's server: the README's, scaled down so that
// Check takes about a second.
const (
	readHeader = 300 * time.Millisecond
	read       = 300 * time.Millisecond
	write      = 600 * time.Millisecond
	idle       = 600 * time.Millisecond
)

// ServeHTTP serves h on a loopback port until the test ends, as the
// README serves its first limit on a router built on net/http: an
// http.Server with read-header, read, write and idle timeouts (scaled
// down). It returns the Server for Check; h must answer GET / and POST /
// without reading the body, with 200.
func ServeHTTP(t *testing.T, h http.Handler) Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeader, ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})
	return Server{Addr: ln.Addr().String(), Read: read, Write: write, Idle: idle,
		BodyStatus: http.StatusOK, SlowHeaderResets: true}
}
