package pacer_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/nethttp/pacer"
)

// A client whose requests wait out 429s and pace themselves on the
// server's RateLimit fields. Here the server refuses the first request and
// asks for a tenth of a second.
func ExampleNew() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0.1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "stored %s with key %s", body, r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()

	tr, err := pacer.New(pacer.Config{
		MaxAttempts: 4,               // the default
		MaxWait:     2 * time.Minute, // the default: a longer Retry-After is an error
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	req, _ := http.NewRequest("POST", srv.URL+"/messages", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("Idempotency-Key", `"msg-42"`) // resent unchanged on every attempt
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 stored {"text":"hi"} with key "msg-42" after 2 attempts
}

// When the transport gives up, the error says how many attempts were made
// and how each one failed.
func ExampleRetryError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0.01")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	client := &http.Client{Transport: pacer.MustNew(pacer.Config{MaxAttempts: 3})}

	_, err := client.Get(srv.URL)
	var re *pacer.RetryError
	if errors.As(err, &re) {
		for i, f := range re.Failures {
			fmt.Printf("attempt %d: %d, server asked to wait %v\n", i+1, f.Status, f.Wait)
		}
		fmt.Println(re.Attempts, "attempts;", errors.Is(err, pacer.ErrAttemptsExhausted))
	}
	// Output:
	// attempt 1: 429, server asked to wait 10ms
	// attempt 2: 429, server asked to wait 10ms
	// attempt 3: 429, server asked to wait 10ms
	// 3 attempts; true
}

// Workers in several processes share one API budget of 100 requests per
// 10 s. A response's RateLimit field cannot tell one worker what the others
// sent since, so each process spends a client-side copy of the budget
// before every attempt; with a core/redisstore store instead of the memory
// store, all processes spend the same copy.
func ExampleConfig_sharedBudget() {
	eng := core.MustNew(core.Config{
		Store: memstore.MustNew(memstore.Config{}), // redisstore.New(...) across processes
		Budgets: []core.Budget{{
			Name: "api", Algorithm: core.FixedWindow, Quota: 100, Window: 10 * time.Second,
			Key: pacer.OutgoingHost, // one budget per API host
		}},
	})
	client := &http.Client{Transport: pacer.MustNew(pacer.Config{
		Layer: eng.MustLayer(core.Use("api")),
	})}
	_ = client // share it between the process's workers
}
