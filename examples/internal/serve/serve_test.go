package serve_test

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	fiber2 "github.com/gofiber/fiber/v2"
	fiber3 "github.com/gofiber/fiber/v3"
	echo4 "github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"

	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/fibermw"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/internal/slowpeer"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// The timeouts of the servers below: the README's, scaled down so that
// the test runs in about a second.
const (
	readHeader = 300 * time.Millisecond
	read       = 300 * time.Millisecond
	write      = 600 * time.Millisecond
	idle       = 600 * time.Millisecond
)

// listen returns a loopback listener.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serveHTTP serves h as the README's first limit does on net/http, Gin and
// Echo: an http.Server with read-header, read, write and idle timeouts.
// It returns the server's address.
func serveHTTP(t *testing.T, h http.Handler) string {
	ln := listen(t)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeader, ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// TestEveryRouterEndsSlowClients runs slowpeer.Check against the README's
// first limit on every router, each served as the README shows: a body
// that never arrives (on a new connection and as a kept-alive
// connection's second request), a slowloris header and a silent
// connection get an answer or a close within the read timeout (net/http
// may reset a slowloris client that is still sending), an idle kept-alive
// connection is closed within the idle timeout.
func TestEveryRouterEndsSlowClients(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	routers := []struct {
		name  string
		serve func(t *testing.T) string
		// The status of a POST whose body never arrives: net/http calls
		// the handler before the body, and the handler does not read it;
		// fasthttp reads the body first.
		bodyStatus int
		// net/http closes a connection whose header timed out without
		// reading the rest: a slowloris client still sending may see a
		// reset (see slowpeer.Server).
		slowHeaderResets bool
	}{
		{"net/http", func(t *testing.T) string {
			mux := http.NewServeMux()
			mux.HandleFunc("/", ok)
			return serveHTTP(t, nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP())(mux))
		}, http.StatusOK, true},
		{"gin", func(t *testing.T) string {
			gin.SetMode(gin.ReleaseMode)
			r := gin.New()
			r.Use(ginmw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
			r.GET("/", gin.WrapF(ok))
			r.POST("/", gin.WrapF(ok))
			return serveHTTP(t, r)
		}, http.StatusOK, true},
		{"echo", func(t *testing.T) string {
			e := echo4.New()
			e.Use(echomw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
			e.GET("/", echo4.WrapHandler(http.HandlerFunc(ok)))
			e.POST("/", echo4.WrapHandler(http.HandlerFunc(ok)))
			return serveHTTP(t, e)
		}, http.StatusOK, true},
		{"echov5", func(t *testing.T) string {
			e := echo5.New()
			e.Use(echov5.LimitBy(100, time.Minute, keyfunc.PeerIP()))
			e.GET("/", echo5.WrapHandler(http.HandlerFunc(ok)))
			e.POST("/", echo5.WrapHandler(http.HandlerFunc(ok)))
			return serveHTTP(t, e)
		}, http.StatusOK, true},
		{"fiber", func(t *testing.T) string {
			app := fiber2.New(fiber2.Config{DisableStartupMessage: true, ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle})
			app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
			app.Get("/", func(c *fiber2.Ctx) error { return c.SendString("ok") })
			app.Post("/", func(c *fiber2.Ctx) error { return c.SendString("ok") })
			ln := listen(t)
			done := make(chan error, 1)
			go func() { done <- fibermw.Serve(app, ln) }()
			t.Cleanup(func() {
				_ = app.ShutdownWithTimeout(5 * time.Second)
				<-done
			})
			return ln.Addr().String()
		}, http.StatusRequestTimeout, false},
		{"fiberv3", func(t *testing.T) string {
			app := fiber3.New(fiber3.Config{ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle})
			app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
			app.Get("/", func(c fiber3.Ctx) error { return c.SendString("ok") })
			app.Post("/", func(c fiber3.Ctx) error { return c.SendString("ok") })
			ln := listen(t)
			done := make(chan error, 1)
			go func() { done <- fiberv3.Serve(app, ln, fiber3.ListenConfig{DisableStartupMessage: true}) }()
			t.Cleanup(func() {
				_ = app.ShutdownWithTimeout(5 * time.Second)
				<-done
			})
			return ln.Addr().String()
		}, http.StatusRequestTimeout, false},
	}
	for _, r := range routers {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			slowpeer.Check(t, slowpeer.Server{Addr: r.serve(t), Read: read, Write: write, Idle: idle, BodyStatus: r.bodyStatus, SlowHeaderResets: r.slowHeaderResets})
		})
	}
}
