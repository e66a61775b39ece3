package benchpeers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The quick check that every contender is wired right, so that no row of
// the tables measures a limiter that does not limit: with a quota of 5 per
// minute, each store admits exactly 5 of 20 decisions for one key, and each
// middleware answers 200 five times, then 429, on one server and on a
// cluster. It runs in seconds:
//
//	cd .ci/bench-peers && GOWORK=off go test ./...

const (
	wireQuota  = 5
	wireWindow = time.Minute
	wireTries  = 20
)

func TestInMemAdmitsQuota(t *testing.T) {
	for _, c := range InMemContenders() {
		t.Run(c.Name, func(t *testing.T) {
			worker, closeFn := c.New(wireQuota, wireWindow, 1)
			if closeFn != nil {
				defer closeFn()
			}
			allow := worker()
			admitted := 0
			for range wireTries {
				if allow("203.0.113.9") {
					admitted++
				}
			}
			want := wireQuota
			if c.Paces { // it waits instead of denying, and is never asked to
				want = wireTries
			}
			if admitted != want {
				t.Fatalf("admitted %d of %d, want %d", admitted, wireTries, want)
			}
			// Another key has a budget of its own.
			if !c.OneKeyOnly && !allow("198.51.100.7") {
				t.Fatal("a second key was denied")
			}
		})
	}
}

func TestMiddlewareAnswers200Then429(t *testing.T) {
	for _, r := range Routers() {
		if len(r.Contenders) == 0 || r.Contenders[0].Name != Bare {
			t.Fatalf("%s: the bare router must come first", r.Name)
		}
		for _, c := range r.Contenders {
			t.Run(r.Name+"/"+c.Name, func(t *testing.T) {
				serve := c.New(wireQuota, wireWindow)()
				for i := 1; i <= wireQuota+2; i++ {
					want := http.StatusOK
					if i > wireQuota && c.Name != Bare {
						want = http.StatusTooManyRequests
					}
					if got := serve(); got != want {
						t.Fatalf("request %d: status %d, want %d", i, got, want)
					}
				}
			})
		}
	}
}

func TestRedisAdmitsQuota(t *testing.T) {
	admitsQuota(t, redisClient(t, 1))
}

// TestRedisClusterAdmitsQuota is TestRedisAdmitsQuota on the cluster of
// BenchmarkRedisCluster.
func TestRedisClusterAdmitsQuota(t *testing.T) {
	cc, err := NewClusterClient(redistest.StartCluster(t, 3).Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	admitsQuota(t, cc)
}

// TestRedisRingAdmitsQuota is TestRedisAdmitsQuota on a Ring of three
// servers, as BenchmarkRedisRing measures.
func TestRedisRingAdmitsQuota(t *testing.T) {
	admitsQuota(t, startRing(t, 3))
}

// admitsQuota checks that every Redis contender on rdb admits wireQuota
// of wireTries decisions for one key (the floor admits every one).
func admitsQuota(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	for _, c := range RedisContenders() {
		t.Run(c.Name, func(t *testing.T) {
			flush(t, rdb)
			check, closeFn, err := c.New(rdb, wireQuota, wireWindow)
			if err != nil {
				t.Fatal(err)
			}
			if closeFn != nil {
				defer closeFn()
			}
			admitted := 0
			for range wireTries {
				ok, err := check(ctx, "203.0.113.9")
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
			}
			want := wireQuota
			if c.Floor { // no limiter: one script run per decision
				want = wireTries
			}
			if admitted != want {
				t.Fatalf("admitted %d of %d, want %d", admitted, wireTries, want)
			}
		})
	}
}
