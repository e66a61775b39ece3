package pacer_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/redisstore"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// clientSharedEngine is the client side of a shared budget: an engine on
// store with the same budget definition as the server.
func clientSharedEngine(t *testing.T, store core.Store, b core.Budget) *core.Engine {
	t.Helper()
	b.Key = pacer.OutgoingHost
	eng, err := core.New(core.Config{Store: store, Budgets: []core.Budget{b}})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// clientWorkers runs workers goroutines per client, each sending perWorker
// GETs to url, and fails the test on any error.
func clientWorkers(t *testing.T, clients []*http.Client, workers, perWorker int, url string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range workers {
			wg.Go(func() {
				for i := range perWorker {
					if code, err := clientGet(t, c, url); code != 200 || err != nil {
						t.Errorf("request %d: %d, %v", i, code, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestTransportSharedBudget: two transports (think two processes) with
// layers of one engine never overspend the server's budget, although the
// server sends no rate-limit fields to pace by. Without the layer, the same
// load is refused again and again.
func TestTransportSharedBudget(t *testing.T) {
	budget := clientFixed(10, 10*time.Second)
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log clientLog
				srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersNone, budget)))
				eng := clientSharedEngine(t, memstore.MustNew(memstore.Config{SweepInterval: -1}), budget)
				var clients []*http.Client
				for range 2 {
					cfg := pacer.Config{Base: base, MaxAttempts: 10}
					if shared {
						cfg.Layer = eng.MustLayer(core.Use("api"))
					}
					clients = append(clients, clientTransport(t, cfg))
				}
				start := time.Now()
				clientWorkers(t, clients, 3, 10, srv.URL+"/")
				refused := log.count(429)
				if shared && refused != 0 {
					t.Errorf("%d attempts refused; want 0", refused)
				}
				if !shared && refused < 10 {
					t.Errorf("%d attempts refused without the shared budget; want many", refused)
				}
				// 60 requests at 10 per 10 s: the last window opens at 50 s.
				if d := time.Since(start); shared && d != 50*time.Second {
					t.Errorf("took %v; want 50s", d)
				}
			})
		})
	}
}

// TestTransportSharedBudgetShapes: a leaky-bucket client budget spaces
// attempts out, the transport waiting each shaping delay.
func TestTransportSharedBudgetShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(int, http.ResponseWriter, *http.Request) {})))
		eng := clientSharedEngine(t, memstore.MustNew(memstore.Config{SweepInterval: -1}),
			core.Budget{Name: "api", Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, MaxWait: time.Minute})
		c := clientTransport(t, pacer.Config{Base: base, Layer: eng.MustLayer(core.Use("api"))})
		start := time.Now()
		clientWorkers(t, []*http.Client{c}, 5, 1, srv.URL+"/")
		if got := clientArrivals(&log, start); fmt.Sprint(got) != "[0 1 2 3 4]" {
			t.Errorf("arrivals %v; want one a second", got)
		}
	})
}

// TestTransportSharedBudgetRefundsRefusedAttempts: an attempt the server
// refuses is given back to the client-side budget, as the server charged
// nothing for it.
func TestTransportSharedBudgetRefundsRefusedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientQuotagate(core.HeadersIETF, clientFixed(1, time.Second))))
		budget := clientFixed(100, 10*time.Second)
		budget.Key = clientConstKey
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{budget}})
		c := clientTransport(t, pacer.Config{Base: base, DisablePacing: true, Layer: eng.MustLayer(core.Use("api"))})
		clientSequential(t, c, srv.URL+"/", 2)
		if got := log.statuses(); fmt.Sprint(got) != "[200 429 200]" {
			t.Fatalf("server answered %v", got)
		}
		// In the client's 10 s window: one charge for the first request,
		// one for the retry 1 s later; none for the refused attempt.
		probe := eng.MustLayer(core.Use("api"), core.Cost(0))
		var d core.Decision
		probe.Decide(&core.Request{Method: "GET"}, &d)
		if len(d.Results) != 1 || d.Results[0].Remaining != 98 {
			t.Errorf("client budget results %+v; want 98 remaining", d.Results)
		}
	})
}

func TestTransportSharedBudgetDenials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(clientScript(func(int, http.ResponseWriter, *http.Request) {})))
		noKey := core.Budget{Name: "api", Quota: 10, Window: time.Second,
			Key: func(*core.Request) (string, error) { return "", core.ErrNoKey }}
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{noKey}})
		c := clientTransport(t, pacer.Config{Base: base, Layer: eng.MustLayer(core.Use("api"))})
		_, err := clientGet(t, c, srv.URL+"/")
		if re := clientRetryErr(t, err); !errors.Is(err, pacer.ErrBudgetDenied) || !errors.Is(err, core.ErrNoKey) || re.Attempts != 0 {
			t.Errorf("a budget without a key: %v", err)
		}

		hourly := clientSharedEngine(t, memstore.MustNew(memstore.Config{SweepInterval: -1}), clientFixed(1, time.Hour))
		c = clientTransport(t, pacer.Config{Base: base, Layer: hourly.MustLayer(core.Use("api"))})
		clientSequential(t, c, srv.URL+"/", 1)
		start := time.Now()
		_, err = clientGet(t, c, srv.URL+"/")
		if re := clientRetryErr(t, err); !errors.Is(err, pacer.ErrWaitTooLong) || re.Attempts != 0 || time.Since(start) != 0 {
			t.Errorf("an hour's wait: %v after %v", err, time.Since(start))
		}
		if n := len(log.list()); n != 1 {
			t.Errorf("server saw %d requests; want 1", n)
		}
	})
}

// TestTransportSharedBudgetRedis coordinates two "processes" (two engines,
// each with its own Redis client) through one real redis-server, against
// a loopback server limited by quotagate, on real time. The server sends
// no rate-limit fields, so only the shared budget keeps the clients within
// it.
func TestTransportSharedBudgetRedis(t *testing.T) {
	rs := redistest.Start(t)
	budget := clientFixed(5, time.Second)
	var log clientLog
	srv := httptest.NewServer(log.wrap(clientQuotagate(core.HeadersNone, budget)))
	defer srv.Close()
	var clients []*http.Client
	for range 2 {
		rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
		defer rc.Close()
		store, err := redisstore.New(rc, redisstore.Config{Prefix: "client-test:", Timeout: 2 * time.Second}) // a loaded machine must not fail open
		if err != nil {
			t.Fatal(err)
		}
		eng := clientSharedEngine(t, store, budget)
		clients = append(clients, clientTransport(t, pacer.Config{Base: srv.Client().Transport, Layer: eng.MustLayer(core.Use("api"))}))
	}
	start := time.Now()
	least := clientLeastTime(start, 30, 5, time.Second)
	clientWorkers(t, clients, 3, 5, srv.URL+"/")
	elapsed := time.Since(start)
	seen := log.list()
	t.Logf("30 requests from 2 transports sharing a Redis budget: %d attempts, %d refused, %v (least %v)", len(seen), log.count(429), elapsed, least)
	if n := log.count(200); n != 30 {
		t.Errorf("%d requests succeeded; want 30", n)
	}
	// A request decided by Redis's clock in the last instant of a window
	// can reach the server in the next one; allow one such per boundary.
	if n := log.count(429); n > 5 {
		t.Errorf("%d attempts refused; want at most one per window boundary", n)
	}
	if elapsed < least {
		t.Errorf("took %v, less than the server allows (%v)", elapsed, least)
	}
}

// TestTransportDenialFreesItsPacingSlot: an attempt the shared budget
// refuses after pacing let it start does not keep holding a unit of the
// server's budget.
func TestTransportDenialFreesItsPacingSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log clientLog
		srv, base := startClientMemServer(t, log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("RateLimit", `"api";r=1;t=60`)
		})))
		b := core.Budget{Name: "api", Quota: 100, Window: time.Minute, Key: func(r *core.Request) (string, error) {
			if pacer.OutgoingRequest(r).URL.Path == "/nokey" {
				return "", core.ErrNoKey
			}
			return "k", nil
		}}
		eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: []core.Budget{b}})
		c := clientTransport(t, pacer.Config{Base: base, Layer: eng.MustLayer(core.Use("api"))})
		clientSequential(t, c, srv.URL+"/ok", 1)
		if _, err := clientGet(t, c, srv.URL+"/nokey"); !errors.Is(err, pacer.ErrBudgetDenied) {
			t.Fatalf("error %v", err)
		}
		start := time.Now()
		clientSequential(t, c, srv.URL+"/ok", 1)
		if d := time.Since(start); d != 0 {
			t.Errorf("the next request waited %v; want none, one unit is left", d)
		}
	})
}
