package redisstore

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestOpenChecksTheServer: Open fails, within its timeouts, when the
// server cannot be reached or refuses the credentials, so that a mistyped
// address is an error at start-up, not a store that fails every call
// (and, with the default failure mode, a limiter that limits nothing).
// Config.Lazy opens without asking.
func TestOpenChecksTheServer(t *testing.T) {
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "s3cret")
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := "127.0.0.1:" + itoa(port)
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"nothing listens", "redis://" + down + "/0", "connection refused"},
		{"nothing listens, host:port", down, "connection refused"},
		{"no password", "redis://" + srv.Addr() + "/0", "NOAUTH"},
		{"wrong password", "redis://:wr0ng@" + srv.Addr() + "/0", "WRONGPASS"},
		{"database out of range", "redis://:s3cret@" + srv.Addr() + "/99", "DB index is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			st, client, err := Open(tc.addr, Config{})
			if err == nil {
				client.Close()
				t.Fatalf("Open(%q) = %v, nil; want an error", tc.addr, st)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wr0ng") {
				t.Errorf("Open(%q): %v; want an error that says %q and repeats no password", tc.addr, err, tc.want)
			}
			if !strings.Contains(err.Error(), "Lazy") {
				t.Errorf("Open(%q): %v; want an error that names Config.Lazy", tc.addr, err)
			}
			if took := time.Since(start); took > DefaultDialTimeout+topologyCheckTimeout {
				t.Errorf("Open(%q) took %v", tc.addr, took)
			}
			// Lazy opens without asking the server.
			st, client, err = Open(tc.addr, Config{Lazy: true})
			if err != nil {
				t.Fatalf("Open(%q, Lazy) = %v", tc.addr, err)
			}
			client.Close()
		})
	}
	st, client, err := Open("redis://:s3cret@"+srv.Addr()+"/0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if out := take(t, st, "k"); !out[0].Charged {
		t.Fatalf("take: %+v", out[0])
	}
}

// TestOpenValidatesOptions: every URL option a client would misuse is an
// error that names it, never a panic or an allocation that takes the
// process down, and no error repeats a secret (user, password, query).
func TestOpenValidatesOptions(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:1/0?pool_size=-5", "pool_size"},
		{"redis://127.0.0.1:1/0?pool_size=100000000", "pool_size"},
		{"redis://127.0.0.1:1/-1", "database"},
		{"redis://127.0.0.1:1/0?db=-1", "database"},
		{"redis://127.0.0.1:1/0?min_idle_conns=-4", "min_idle_conns"},
		{"redis://127.0.0.1:1/0?max_idle_conns=100000000", "max_idle_conns"},
		{"redis://127.0.0.1:1/0?max_active_conns=-2", "max_active_conns"},
		{"redis://127.0.0.1:1/0?max_retries=-9", "max_retries"},
		{"redis://127.0.0.1:1/0?dial_timeout=-5s", "dial_timeout"},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2&pool_size=-1", "pool_size"},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2&pool_size=100000000", "pool_size"},
	} {
		_, _, err := Open(tc.url, Config{Lazy: true})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v; want an error naming %s", tc.url, err, tc.want)
		}
	}
	for _, url := range []string{
		"redis://127.0.0.1:1/0?password=s3cretQUERY",
		"redis://127.0.0.1:1/0?password=s3cretQUERY&pool_size=-5",
		"redis://s3cretUSER:s3cretPASS@127.0.0.1:1/0?pool_size=-5",
		"redis://s3cretUSER:s3cretPASS@127.0.0.1:1/0?bogus=s3cretQUERY",
		"redis://s3cretUSER:s3cretPASS@127.0.0.1:1?addr=127.0.0.1:2&password=s3cretQUERY",
		"redis://s3cretUSER:s3cretPASS@127.0.0.1:1?addr=127.0.0.1:2&pool_size=-3",
		"redis://s3cretUSER:s3cretPASS@127.0.0.1:1/0",
	} {
		_, _, err := Open(url, Config{})
		if err == nil {
			t.Errorf("Open(%q): no error", url)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): %v; the error repeats a secret", url, err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestOpenedClientHandshakesOnce: a connection of a client that ParseAddr
// builds sends HELLO and no CLIENT SETINFO before its first call, so that
// a call on a new connection (after a restart, a failover, or a timeout
// that closed the last one) costs one round trip more, not two. Inside the
// call's deadline that second round trip was fatal on a distant server:
// through a proxy adding 10 ms each way, with the default 50 ms deadline,
// every call on a new connection timed out (HELLO, SETINFO and the call:
// about 60 ms), the timeout closed the connection, and the next call
// needed a new one: the store never recovered.
func TestOpenedClientHandshakesOnce(t *testing.T) {
	srv := redistest.Start(t)
	a, err := ParseAddr(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent bytes.Buffer
	a.single.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeRecorder{Conn: c, mu: &mu, to: &sent}, nil
	}
	st, client, err := a.Open(Config{Prefix: "hs:"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := st.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Contains(bytes.ToUpper(sent.Bytes()), []byte("HELLO")) {
		t.Fatalf("no HELLO among what the client sent; the recorder missed the handshake: %.200q", sent.String())
	}
	if bytes.Contains(bytes.ToUpper(sent.Bytes()), []byte("SETINFO")) {
		t.Errorf("the store's client sent CLIENT SETINFO on a new connection: %.300q", sent.String())
	}
}

// writeRecorder is a connection that copies what it writes into to.
type writeRecorder struct {
	net.Conn
	mu *sync.Mutex
	to *bytes.Buffer
}

func (w writeRecorder) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.to.Write(b)
	w.mu.Unlock()
	return w.Conn.Write(b)
}
