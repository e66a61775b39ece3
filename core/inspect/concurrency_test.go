package inspect_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
	"github.com/quotagate/quotagate/core/memstore"
)

// A concurrency budget's lookup shows its slots in flight.
func TestLookupConcurrency(t *testing.T) {
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{{
		Name: "exports", Algorithm: core.Concurrency, Quota: 4, Window: 10 * time.Minute,
		Key: func(*core.Request) (string, error) { return secretKey, nil },
	}}})
	l := eng.MustLayer(core.Use("exports"))
	var d core.Decision
	l.Decide(&core.Request{Method: "POST", Path: "/export", Context: context.Background()}, &d)
	if !d.Allowed {
		t.Fatalf("decision: %+v", d)
	}
	srv := httptest.NewServer(inspect.MustNew(inspect.Config{Engine: eng, Authorize: inspect.Loopback}))
	defer srv.Close()
	lookup := func(wantFree, wantInFlight int64) {
		t.Helper()
		_, _, body := get(t, srv.URL+"?format=json&key="+secretKey)
		var rep struct {
			Lookup struct {
				Budgets []struct {
					Remaining int64
					InFlight  *int64 `json:"in_flight"`
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		if b := rep.Lookup.Budgets; len(b) != 1 || b[0].Remaining != wantFree || b[0].InFlight == nil || *b[0].InFlight != wantInFlight {
			t.Fatalf("lookup: %s", body)
		}
	}
	lookup(3, 1)
	if _, _, page := get(t, srv.URL+"?key="+secretKey); !strings.Contains(page, "1 in flight") {
		t.Error("the page does not show the slot in flight")
	}
	d.Done(context.Background(), 0)
	lookup(4, 0)
}
