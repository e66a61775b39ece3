package fiberv3_test

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/internal/slowpeer"
	"github.com/quotagate/quotagate/keyfunc"
)

// readmeApp is the README's first limit on Fiber v3, with cfg.
func readmeApp(cfg fiber.Config) *fiber.App {
	app := fiber.New(cfg)
	app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	app.Post("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	return app
}

// quiet is the ListenConfig of every test: no startup banner.
var quiet = fiber.ListenConfig{DisableStartupMessage: true}

// start runs serve (which serves app) on its own goroutine until the test
// ends, and returns the address app listens on, once it does.
func start(t *testing.T, app *fiber.App, serve func() error) string {
	t.Helper()
	listening := make(chan string, 1)
	app.Hooks().OnListen(func(d fiber.ListenData) error {
		listening <- net.JoinHostPort(d.Host, d.Port)
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- serve() }()
	t.Cleanup(func() {
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case addr := <-listening:
		return addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	return ""
}

// serveOn serves app with fiberv3.Serve on a loopback port.
func serveOn(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return start(t, app, func() error { return fiberv3.Serve(app, ln, quiet) })
}

// TestServeSlowClients: served by Serve, the README's app with its
// timeouts answers slow and silent clients (a body that never arrives, on
// a new or a kept-alive connection, 408; a slowloris header; a silent
// connection) or closes their connection within its read timeout, and
// closes an idle kept-alive connection within its idle timeout, and
// answers a 24 KiB header sent in pieces 431 with no reset: every case of
// slowpeer.Check, on real sockets. Served by app.Listener instead, the
// kept-alive connection's 408 never comes (the connection closes at the
// read timeout) and the large header's client gets a broken pipe.
func TestServeSlowClients(t *testing.T) {
	const read, write, idle = 300 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond
	app := readmeApp(fiber.Config{ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle})
	slowpeer.Check(t, slowpeer.Server{Addr: serveOn(t, app), Read: read, Write: write, Idle: idle, BodyStatus: fiber.StatusRequestTimeout})
}

// TestServeDefaults: Serve gives an app whose config sets no timeout the
// defaults its doc names, keeps those the config sets, and leaves an
// unset IdleTimeout to ReadTimeout when that is set.
func TestServeDefaults(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  fiber.Config
		want [3]time.Duration // read, write, idle
	}{
		{"none", fiber.Config{}, [3]time.Duration{10 * time.Second, 20 * time.Second, time.Minute}},
		{"read", fiber.Config{ReadTimeout: 5 * time.Second}, [3]time.Duration{5 * time.Second, 20 * time.Second, 0}},
		{"all", fiber.Config{ReadTimeout: 1, WriteTimeout: 2, IdleTimeout: 3}, [3]time.Duration{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := readmeApp(c.cfg)
			serveOn(t, app) // the address is known once app listens, after Serve set the timeouts
			srv := app.Server()
			if got := [3]time.Duration{srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout}; got != c.want {
				t.Fatalf("read, write, idle = %v, want %v", got, c.want)
			}
		})
	}
}

// TestListen: Listen serves as Serve does, on the address it is given,
// and tells ListenerAddrFunc the address.
func TestListen(t *testing.T) {
	const read, write, idle = 300 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond
	app := readmeApp(fiber.Config{ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // a free port, very likely still free below
	told := make(chan net.Addr, 1)
	cfg := quiet
	cfg.ListenerAddrFunc = func(a net.Addr) { told <- a }
	addr := start(t, app, func() error { return fiberv3.Listen(app, "127.0.0.1:"+strconv.Itoa(port), cfg) })
	if a := <-told; a.String() != addr {
		t.Errorf("ListenerAddrFunc was told %v, want %v", a, addr)
	}
	slowpeer.Check(t, slowpeer.Server{Addr: addr, Read: read, Write: write, Idle: idle, BodyStatus: fiber.StatusRequestTimeout})
}

// TestServeRefuses: Serve and Listen refuse a config whose settings
// app.Listener ignores (TLS, prefork), and Listen a network other than
// TCP, and serve nothing.
func TestServeRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, cfg := range []fiber.ListenConfig{
		{CertFile: "cert.pem", CertKeyFile: "key.pem"},
		{TLSConfig: &tls.Config{}},
		{TLSConfigFunc: func(*tls.Config) {}},
		{EnablePrefork: true},
	} {
		app := readmeApp(fiber.Config{})
		if err := fiberv3.Serve(app, ln, cfg); err == nil {
			t.Errorf("Serve: no error for %+v", cfg)
		}
		if err := fiberv3.Listen(app, "127.0.0.1:0", cfg); err == nil {
			t.Errorf("Listen: no error for %+v", cfg)
		}
	}
	if err := fiberv3.Listen(readmeApp(fiber.Config{}), "/tmp/x.sock", fiber.ListenConfig{ListenerNetwork: fiber.NetworkUnix}); err == nil {
		t.Error("Listen: no error for a Unix socket")
	}
}

// TestServeShutdownAtListen: a Shutdown that comes once the app reports
// it listens (its OnListen hooks run) but before fasthttp has taken the
// listener still ends Serve. app.Listener alone misses it (fasthttp's
// Shutdown finds no listener to close) and serves on for good.
func TestServeShutdownAtListen(t *testing.T) {
	app := readmeApp(fiber.Config{})
	app.Hooks().OnListen(func(fiber.ListenData) error {
		return app.ShutdownWithTimeout(5 * time.Second) // before app.server.Serve(ln)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fiberv3.Serve(app, ln, quiet) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		ln.Close() // let the goroutine end
		t.Fatal("Serve still serving 10s after Shutdown")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("listener still accepts after Serve returned")
	}
}
