package benchpeers

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestProxyCloseEndsIdleConnections: Close returns while connections sit
// idle in both directions, as a client's pooled connections do when a
// benchmark ends. A Close that missed them (the accept loop had forgotten
// its connections once the listener closed) waited for their readers
// forever and hung the harness between two rows.
func TestProxyCloseEndsIdleConnections(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() { // an upstream that echoes
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	for round := range 200 {
		p, err := StartProxy(up.Addr().String(), 100*time.Microsecond)
		if err != nil {
			t.Fatal(err)
		}
		var conns []net.Conn
		for range 4 {
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		closed := make(chan struct{})
		go func() { _ = p.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Close did not return in 10 s with 4 idle connections", round)
		}
		for _, c := range conns {
			_ = c.Close()
		}
	}
}
