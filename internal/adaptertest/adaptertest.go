// Package adaptertest helps the router adapters test their router-native
// options over real HTTP servers: an engine whose store counts its calls,
// and a client that reads what the options must leave in a response.
package adaptertest

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
)

// CountingStore is a memory store that counts its Take calls.
type CountingStore struct {
	*memstore.Store
	takes atomic.Int64
}

// Take counts the call and takes from the memory store.
func (s *CountingStore) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	s.takes.Add(1)
	return s.Store.Take(ctx, items, out)
}

// Takes returns how many times Take was called.
func (s *CountingStore) Takes() int64 { return s.takes.Load() }

// KeyHeader is the request header the Engine's budget is keyed by, unless
// the test gives a key function of its own.
const KeyHeader = "X-Key"

// Engine returns an engine over a CountingStore with one budget, "b", of
// quota requests per hour (a sliding log, so counts are exact), keyed by
// key, or by the KeyHeader request header when key is nil.
func Engine(t testing.TB, quota int64, key core.KeyFunc) (*core.Engine, *CountingStore) {
	t.Helper()
	ms := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	if key == nil {
		key = func(r *core.Request) (string, error) {
			if v := r.Header.Get(KeyHeader); v != "" {
				return v, nil
			}
			return "", core.ErrNoKey
		}
	}
	st := &CountingStore{Store: ms}
	eng, err := core.New(core.Config{Store: st, Budgets: []core.Budget{
		{Name: "b", Algorithm: core.SlidingLog, Quota: quota, Window: time.Hour, Key: key},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return eng, st
}

// Response is what a test reads from a response.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Get sends GET base+path over a real connection, with the KeyHeader set
// to key unless key is empty.
func Get(t testing.TB, base, path, key string) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(KeyHeader, key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
}

// WantSkipped fails t unless r is a plain 200 without rate-limit fields.
func WantSkipped(t testing.TB, r Response, what string) {
	t.Helper()
	if r.Status != http.StatusOK || r.Header.Get("RateLimit") != "" || r.Header.Get("RateLimit-Policy") != "" {
		t.Errorf("%s: %d %v, want 200 without rate-limit fields", what, r.Status, r.Header)
	}
}

// WantDenied fails t unless r is a denial with status and body, carrying
// the rate-limit fields of budget "b" exhausted and a Retry-After.
func WantDenied(t testing.TB, r Response, status int, body, what string) {
	t.Helper()
	if r.Status != status || r.Body != body {
		t.Errorf("%s: %d %q, want %d %q", what, r.Status, r.Body, status, body)
	}
	if r.Header.Get("Retry-After") == "" || r.Header.Get("RateLimit-Policy") != `"b";q=1;w=3600` {
		t.Errorf("%s: header %v lacks Retry-After or the budget's fields", what, r.Header)
	}
}
