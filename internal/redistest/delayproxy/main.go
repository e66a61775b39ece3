// Command delayproxy is the delaying TCP proxy of redistest.ServeDelayed in a
// process of its own, for tests whose own process is too busy to stand
// in for a network: it forwards a 127.0.0.1 port to -to, holding every
// chunk of bytes for -delay in each direction.
//
//	delayproxy -to 127.0.0.1:6379 -delay 50ms
//
// It prints "listening on HOST:PORT" on standard output once it accepts
// connections, and exits with status 0 on SIGTERM or SIGINT, after closing
// every connection it forwarded.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

func main() {
	to := flag.String("to", "", "the address to forward to, HOST:PORT")
	delay := flag.Duration("delay", 0, "how long each chunk is held in each direction, e.g. 50ms")
	addr := flag.String("addr", "127.0.0.1:0", "the address to listen on")
	flag.Parse()
	if err := run(*addr, *to, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(2)
	}
}

func run(listen, to string, delay time.Duration) error {
	if to == "" {
		return fmt.Errorf("-to is required: the address to forward to, e.g. -to 127.0.0.1:6379")
	}
	if _, _, err := net.SplitHostPort(to); err != nil {
		return fmt.Errorf("-to %q: %v", to, err)
	}
	if delay < 0 {
		return fmt.Errorf("-delay %v is negative", delay)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	stop := redistest.ServeDelayed(l, to, delay)
	fmt.Printf("listening on %s\n", l.Addr())
	<-ctx.Done()
	stop()
	return nil
}
