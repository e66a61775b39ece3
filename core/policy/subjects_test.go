package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSubjectsCachesUntilTTL(t *testing.T) {
	clock := newFakeClock()
	apps := newSubjectTable(map[string]Subject{"acme": {Cap: 80}})
	subs := MustSubjects(apps.lookup, CacheConfig{TTL: 10 * time.Second, Clock: clock})
	ctx := context.Background()
	for range 100 {
		if s, err := subs.Get(ctx, "acme"); err != nil || s.Cap != 80 {
			t.Fatalf("Get = %+v, %v", s, err)
		}
	}
	if n := subs.Lookups(); n != 1 {
		t.Fatalf("%d lookups for 100 gets within the TTL, want 1", n)
	}
	apps.set("acme", Subject{Cap: 5000})
	clock.Advance(9 * time.Second)
	if s, _ := subs.Get(ctx, "acme"); s.Cap != 80 {
		t.Fatalf("within the TTL the cached subject is used; got cap %d", s.Cap)
	}
	clock.Advance(time.Second)
	if s, _ := subs.Get(ctx, "acme"); s.Cap != 5000 {
		t.Fatalf("after the TTL the change is seen; got cap %d", s.Cap)
	}
	if n := subs.Lookups(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
}

func TestSubjectsInvalidate(t *testing.T) {
	apps := newSubjectTable(map[string]Subject{"acme": {Plan: "free"}, "other": {Plan: "free"}})
	subs := MustSubjects(apps.lookup, CacheConfig{TTL: time.Hour})
	ctx := context.Background()
	subs.Get(ctx, "acme")
	subs.Get(ctx, "other")
	apps.set("acme", Subject{Plan: "pro"})
	apps.set("other", Subject{Plan: "pro"})
	subs.Invalidate("acme")
	if s, _ := subs.Get(ctx, "acme"); s.Plan != "pro" {
		t.Fatalf("after Invalidate: plan %q, want pro", s.Plan)
	}
	if s, _ := subs.Get(ctx, "other"); s.Plan != "free" {
		t.Fatalf("Invalidate(acme) touched other: plan %q", s.Plan)
	}
	subs.InvalidateAll()
	if s, _ := subs.Get(ctx, "other"); s.Plan != "pro" {
		t.Fatalf("after InvalidateAll: plan %q, want pro", s.Plan)
	}
	if subs.Len() != 1 {
		t.Fatalf("Len = %d, want 1 (only other was looked up again)", subs.Len())
	}
}

// Concurrent misses for one key run one lookup.
func TestSubjectsSingleFlight(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	lookup := func(ctx context.Context, key string) (Subject, error) {
		calls.Add(1)
		<-release
		return Subject{Plan: "p-" + key}, nil
	}
	subs := MustSubjects(lookup, CacheConfig{})
	const n = 50
	var wg sync.WaitGroup
	results := make(chan string, n)
	for range n {
		wg.Go(func() {
			s, err := subs.Get(context.Background(), "acme")
			if err != nil {
				results <- err.Error()
				return
			}
			results <- s.Plan
		})
	}
	// Let every goroutine reach the cache before the lookup returns.
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	close(results)
	for r := range results {
		if r != "p-acme" {
			t.Fatalf("a waiter got %q", r)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d lookups for %d concurrent misses, want 1", c, n)
	}
}

// A waiter whose request ends stops waiting; the lookup goes on for the
// others.
func TestSubjectsWaiterContext(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	subs := MustSubjects(func(ctx context.Context, key string) (Subject, error) {
		close(started)
		<-release
		return Subject{Cap: 7}, nil
	}, CacheConfig{})
	first := make(chan error, 1)
	go func() {
		_, err := subs.Get(context.Background(), "k")
		first <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := subs.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if s, err := subs.Get(context.Background(), "k"); err != nil || s.Cap != 7 {
		t.Fatalf("after the lookup: %+v, %v", s, err)
	}
}

// A lookup started before Invalidate is not cached.
func TestSubjectsInvalidateDuringLookup(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var version atomic.Int32
	subs := MustSubjects(func(ctx context.Context, key string) (Subject, error) {
		v := version.Load()
		started <- struct{}{}
		<-release
		return Subject{Cap: int64(v)}, nil
	}, CacheConfig{TTL: time.Hour})
	done := make(chan Subject)
	go func() {
		s, _ := subs.Get(context.Background(), "k")
		done <- s
	}()
	<-started
	version.Store(2) // the application changes the subject...
	subs.Invalidate("k")
	release <- struct{}{} // ...while the old lookup finishes
	if s := <-done; s.Cap != 0 {
		t.Fatalf("the in-flight request got cap %d, want the old 0", s.Cap)
	}
	go func() { <-started; release <- struct{}{} }()
	if s, _ := subs.Get(context.Background(), "k"); s.Cap != 2 {
		t.Fatalf("after Invalidate the next request saw cap %d, want 2 (the stale lookup was cached)", s.Cap)
	}
}

func TestSubjectsFailures(t *testing.T) {
	clock := newFakeClock()
	var fail atomic.Bool
	var calls atomic.Int32
	var reported atomic.Int32
	subs := MustSubjects(func(ctx context.Context, key string) (Subject, error) {
		calls.Add(1)
		if fail.Load() {
			return Subject{}, errors.New("backend down")
		}
		return Subject{Plan: "pro"}, nil
	}, CacheConfig{TTL: 10 * time.Second, ErrorTTL: time.Second, MaxStale: 30 * time.Second, Clock: clock,
		OnError: func(error) { reported.Add(1) }})
	ctx := context.Background()

	// No subject yet: the error is returned and remembered for ErrorTTL.
	fail.Store(true)
	for range 10 {
		if _, err := subs.Get(ctx, "new"); err == nil {
			t.Fatal("failing lookup returned no error")
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d lookups within ErrorTTL, want 1 (failures are remembered)", c)
	}
	clock.Advance(time.Second)
	subs.Get(ctx, "new")
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d lookups after ErrorTTL, want 2", c)
	}

	// A subject looked up before the backend failed is served stale.
	fail.Store(false)
	subs.Get(ctx, "old")
	fail.Store(true)
	clock.Advance(11 * time.Second)
	for range 5 {
		s, err := subs.Get(ctx, "old")
		if err != nil || s.Plan != "pro" {
			t.Fatalf("stale serving: %+v, %v", s, err)
		}
	}
	if c := calls.Load(); c != 4 {
		t.Fatalf("%d lookups, want 4 (one retry, then ErrorTTL)", c)
	}
	// Past TTL + MaxStale the failure surfaces.
	clock.Advance(30 * time.Second)
	if _, err := subs.Get(ctx, "old"); err == nil {
		t.Fatal("a subject past MaxStale was still served")
	}
	if r := reported.Load(); r != calls.Load()-1 {
		t.Fatalf("OnError saw %d failures of %d failing lookups", r, calls.Load()-1)
	}

	// A panicking lookup is a failed one, and waiters are released.
	boom := MustSubjects(func(context.Context, string) (Subject, error) { panic("boom") }, CacheConfig{})
	if _, err := boom.Get(ctx, "k"); err == nil {
		t.Fatal("panicking lookup returned no error")
	}
}

func TestSubjectsBounded(t *testing.T) {
	clock := newFakeClock()
	subs := MustSubjects(func(_ context.Context, key string) (Subject, error) { return Subject{Plan: key}, nil },
		CacheConfig{Size: 160, Clock: clock})
	for i := range 10_000 {
		k := fmt.Sprintf("tenant-%d", i)
		if s, err := subs.Get(context.Background(), k); err != nil || s.Plan != k {
			t.Fatalf("Get(%s) = %+v, %v", k, s, err)
		}
		clock.Advance(time.Millisecond)
	}
	if n := subs.Len(); n > 160 {
		t.Fatalf("cache holds %d keys, cap 160", n)
	}
}

func TestNewSubjectsRejects(t *testing.T) {
	if _, err := NewSubjects(nil, CacheConfig{}); err == nil {
		t.Error("nil lookup accepted")
	}
	ok := func(context.Context, string) (Subject, error) { return Subject{}, nil }
	for _, c := range []CacheConfig{{Size: -1}, {TTL: -1}, {ErrorTTL: -1}, {Timeout: -1}} {
		if _, err := NewSubjects(ok, c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// The lookup's context carries the request's values but not its
// cancellation, with the cache's timeout.
func TestSubjectsLookupContext(t *testing.T) {
	type ctxKey struct{}
	var sawValue atomic.Bool
	var deadline atomic.Int64
	subs := MustSubjects(func(ctx context.Context, key string) (Subject, error) {
		sawValue.Store(ctx.Value(ctxKey{}) == "v")
		if d, ok := ctx.Deadline(); ok {
			deadline.Store(int64(time.Until(d)))
		}
		return Subject{}, ctx.Err()
	}, CacheConfig{Timeout: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	if _, err := subs.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if !sawValue.Load() {
		t.Error("the lookup did not see the request's values")
	}
	if d := time.Duration(deadline.Load()); d <= 2*time.Second || d > 3*time.Second {
		t.Errorf("lookup deadline in %v, want about 3s", d)
	}
}

func BenchmarkSubjectsHit(b *testing.B) {
	subs := MustSubjects(func(context.Context, string) (Subject, error) { return Subject{Cap: 80}, nil }, CacheConfig{})
	ctx := context.Background()
	subs.Get(ctx, "acme")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := subs.Get(ctx, "acme"); err != nil {
			b.Fatal(err)
		}
	}
}
