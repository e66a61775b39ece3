package fibermw

import (
	"errors"
	"fmt"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/quotagate/quotagate/internal/fastreq"
)

// Listen listens on the TCP address addr (on the app's Config().Network,
// "tcp4" unless set) and serves app there as [Serve] does: use it in place
// of app.Listen.
//
//	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute})
//	app.Use(fibermw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
//	log.Fatal(fibermw.Listen(app, ":8080"))
//
// For TLS or any other listener, make it and pass it to Serve.
func Listen(app *fiber.App, addr string) error {
	if err := refusePrefork(app, "Listen"); err != nil {
		return err
	}
	ln, err := net.Listen(app.Config().Network, addr)
	if err != nil {
		return fmt.Errorf("fibermw.Listen: %w", err)
	}
	return Serve(app, ln)
}

// Serve serves app on ln, as app.Listener(ln) does, and makes its server
// answer slow and silent clients as net/http does, where fasthttp alone
// leaves them without an answer or holds their connection for good:
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
// Serving an app on a second listener changes nothing more. Fiber's
// Prefork makes listeners of its own, which Serve cannot reach: with it
// set, Serve and Listen return an error and serve nothing.
func Serve(app *fiber.App, ln net.Listener) error {
	if err := refusePrefork(app, "Serve"); err != nil {
		return err
	}
	fastreq.Harden(app.Server())
	l := fastreq.Linger(ln)
	// fasthttp has usually closed l already; l.Close is idempotent.
	app.Hooks().OnShutdown(func() error { _ = l.Close(); return nil })
	return app.Listener(l)
}

func refusePrefork(app *fiber.App, fn string) error {
	if app.Config().Prefork {
		return errors.New("fibermw." + fn + ": the app's Config.Prefork is set: Fiber's prefork makes its own listeners, which fibermw cannot reach; unset it")
	}
	return nil
}
