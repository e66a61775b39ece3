package fiberv3

import (
	"errors"
	"fmt"
	"net"

	"github.com/gofiber/fiber/v3"
	"github.com/quotagate/quotagate/internal/fastreq"
)

// Listen listens on the TCP address addr (on config's ListenerNetwork:
// "tcp", "tcp4" or "tcp6"; "tcp4" unless set, as Fiber's) and serves app
// there as [Serve] does: use it in place of app.Listen.
//
//	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
//	app.Use(fiberv3.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//	log.Fatal(fiberv3.Listen(app, ":8080"))
//
// config is app.Listen's, less what Serve refuses (TLS, prefork); its
// ListenerAddrFunc is called with the address listened on. For TLS, a
// Unix socket or any other listener, make it and pass it to Serve.
func Listen(app *fiber.App, addr string, config ...fiber.ListenConfig) error {
	if err := refuse("Listen", config); err != nil {
		return err
	}
	network := fiber.NetworkTCP4
	if len(config) > 0 && config[0].ListenerNetwork != "" {
		network = config[0].ListenerNetwork
	}
	switch network {
	case fiber.NetworkTCP, fiber.NetworkTCP4, fiber.NetworkTCP6:
	default:
		return fmt.Errorf("fiberv3.Listen: ListenerNetwork %q: Listen listens on TCP only; make the listener and pass it to Serve", network)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("fiberv3.Listen: %w", err)
	}
	if len(config) > 0 && config[0].ListenerAddrFunc != nil {
		config[0].ListenerAddrFunc(ln.Addr())
	}
	return Serve(app, ln, config...)
}

// Serve serves app on ln, as app.Listener(ln, config...) does, and makes
// its server answer slow and silent clients as net/http does, where
// fasthttp alone leaves them without an answer or holds their connection
// for good:
//
//   - a timeout the app's config sets none of gets a default: ReadTimeout
//     (a request's header and body; fasthttp has no separate header
//     timeout) 10 s, WriteTimeout (an answer, from the handler's return)
//     20 s, and IdleTimeout (a kept-alive connection's wait for its next
//     request) 1 min when ReadTimeout is unset too (set, it bounds the
//     wait, as in net/http). Without them, a body that never arrives, a
//     header sent a byte at a time and a silent connection hold a
//     connection and a goroutine for as long as the client likes. To lift
//     a bound, set it very long: the defaults go on app.Server(), not on
//     app.Config();
//   - an error answer (408 to a request that did not arrive within
//     ReadTimeout, 431 to a header larger than ReadBufferSize) is written
//     under a write deadline of WriteTimeout from that moment; fasthttp
//     alone keeps the one it set for the connection's previous answer,
//     often past on a kept-alive connection, and the client gets a closed
//     connection instead of its 408. The app's ErrorHandler still writes
//     the answer;
//   - a connection closes gracefully: its end of the answer (FIN) goes
//     first, then what the client still sends is read and discarded, for
//     at most 2 s and 256 KiB (1024 connections at a time; beyond that
//     they close at once), before the socket closes. fasthttp closes a
//     connection as soon as it has answered an error, with the rest of the
//     request unread, and the kernel then resets the connection: a client
//     still sending (a header too large, a slow one) gets the reset
//     instead of the answer.
//
// A Shutdown ends Serve also when it comes between the app's OnListen
// hooks and fasthttp's taking the listener, a moment where app.Listener
// alone misses it and serves on for good: Serve closes ln after every
// Shutdown of app.
//
// Serving an app on a second listener changes nothing more. app.Listener
// ignores a config's TLS settings (CertFile, CertKeyFile, CertClientFile,
// TLSConfig, TLSConfigFunc, AutoCertManager) and cannot prefork
// (EnablePrefork): Serve and Listen return an error for a config with any
// of them, and serve nothing. For TLS, pass a listener from tls.NewListener.
func Serve(app *fiber.App, ln net.Listener, config ...fiber.ListenConfig) error {
	if err := refuse("Serve", config); err != nil {
		return err
	}
	fastreq.Harden(app.Server())
	l := fastreq.Linger(ln)
	// fasthttp has usually closed l already; l.Close is idempotent.
	app.Hooks().OnPostShutdown(func(error) error { _ = l.Close(); return nil })
	return app.Listener(l, config...)
}

// refuse returns an error for a config with settings app.Listener ignores.
func refuse(fn string, config []fiber.ListenConfig) error {
	if len(config) == 0 {
		return nil
	}
	c := config[0]
	var set []string
	for _, s := range []struct {
		name string
		set  bool
	}{
		{"CertFile", c.CertFile != ""},
		{"CertKeyFile", c.CertKeyFile != ""},
		{"CertClientFile", c.CertClientFile != ""},
		{"TLSConfig", c.TLSConfig != nil},
		{"TLSConfigFunc", c.TLSConfigFunc != nil},
		{"AutoCertManager", c.AutoCertManager != nil},
		{"EnablePrefork", c.EnablePrefork},
	} {
		if s.set {
			set = append(set, s.name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return errors.New("fiberv3." + fn + ": ListenConfig sets " + fmt.Sprint(set) + ", which app.Listener ignores: for TLS, pass Serve a listener from tls.NewListener; prefork is not supported")
}
