package benchpeers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAccuracy sends 1500 decisions for one key from 8 goroutines against a
// limit of 1000 per minute, within one minute, and prints the number each
// Redis contender admitted, one line per trial (ACCURACY_TRIALS, default 5):
//
//	ACCURACY c=<contender> trial=<n> admitted=<n> requests=1500 errors=<n>
//
// A fixed window admits exactly 1000; a GCRA limiter (redis_rate) may add
// what refilled while the trial ran. It measures; it asserts nothing but
// the absence of errors. Run by run.sh (BENCHPEERS_ACCURACY=1); skipped
// otherwise.
func TestAccuracy(t *testing.T) {
	if testing.Short() || envInt("BENCHPEERS_ACCURACY", 0) == 0 {
		t.Skip("set BENCHPEERS_ACCURACY=1 (run.sh does)")
	}
	const (
		quota    = 1000
		window   = time.Minute
		requests = 1500
		workers  = 8
	)
	trials := envInt("ACCURACY_TRIALS", 5)
	rdb := redisClient(t, workers)
	ctx := context.Background()
	for _, c := range RedisContenders() {
		if c.Floor {
			continue
		}
		for trial := 1; trial <= trials; trial++ {
			flush(t, rdb)
			check, closeFn, err := c.New(rdb, quota, window)
			if err != nil {
				t.Fatal(err)
			}
			// Stay clear of a minute boundary, where a window aligned to
			// the clock would start again within the trial.
			if s := time.Now().Second(); s >= 58 {
				time.Sleep(time.Duration(61-s) * time.Second)
			}
			key := fmt.Sprintf("acc:%d", trial)
			var next, admitted, errs atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= requests {
						ok, err := check(ctx, key)
						if err != nil {
							errs.Add(1)
						} else if ok {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if closeFn != nil {
				closeFn()
			}
			fmt.Printf("ACCURACY c=%s trial=%d admitted=%d requests=%d errors=%d\n",
				c.Name, trial, admitted.Load(), requests, errs.Load())
			if errs.Load() != 0 {
				t.Errorf("%s trial %d: %d errors", c.Name, trial, errs.Load())
			}
		}
	}
}
