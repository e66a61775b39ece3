package reqstate

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestLastLayerOutReleases(t *testing.T) {
	c, st, created := Enter(context.Background())
	if !created || st == nil {
		t.Fatal("no state created")
	}
	inner, st2, created2 := Enter(c)
	if inner != c || st2 != st || created2 {
		t.Fatal("an inner layer did not find the outer layer's state")
	}
	c.Leave() // the outer layer returns first (a timeout middleware)
	if Decision(c) == nil {
		t.Fatal("state released while an inner layer still holds it")
	}
	inner.Leave()
	if Decision(c) != nil {
		t.Fatal("state not released by the last layer out")
	}
	if _, st3, _ := Enter(c); st3 != nil {
		t.Fatal("a layer entered a finished request")
	}
}

func TestConcurrentEnterLeave(t *testing.T) {
	c, _, _ := Enter(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if cc, st, _ := Enter(c); st != nil {
					_ = st.D.Allowed
					cc.Leave()
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	c.Leave()
	wg.Wait()
	if Decision(c) != nil {
		t.Fatal("state not released")
	}
}

func TestSetFieldsReplacesAnotherStyle(t *testing.T) {
	c, st, _ := Enter(context.Background())
	defer c.Leave()
	h := http.Header{}
	// Render real fields through an engine for two styles.
	s := core.MustMemoryStore(core.MemoryConfig{SweepInterval: -1})
	e := core.Must(core.Config{Store: s, Budgets: []core.Budget{{Name: "b", Quota: 5, Window: time.Minute, Key: func(*core.Request) (string, error) { return "k", nil }}}})
	outer := e.MustLayer(core.Use("b"))
	inner := e.MustLayer(core.Use("b"), core.WithHeaders(core.HeadersDraft))
	outer.Decide(&st.Req, &st.D)
	c.SetFields(h, outer, &st.D, true)
	if h.Get("RateLimit-Policy") != `"b";q=5;w=60` || !strings.HasPrefix(h.Get("RateLimit"), `"b";r=4;t=`) {
		t.Fatalf("IETF fields: %v", h)
	}
	c.SetFields(h, inner, &st.D, false)
	if h.Get("RateLimit-Policy") != "" || h.Get("RateLimit") != "" {
		t.Fatalf("stale IETF fields left: %v", h)
	}
	if h.Get("RateLimit-Limit") != "5" || h.Get("RateLimit-Remaining") != "4" {
		t.Fatalf("draft fields: %v", h)
	}
}

// Every field core renders, in every style, has an index in fieldNames, so
// a later layer can always remove it.
func TestFieldNamesCoverEveryStyle(t *testing.T) {
	s := core.MustMemoryStore(core.MemoryConfig{SweepInterval: -1})
	e := core.Must(core.Config{Store: s, Budgets: []core.Budget{{Name: "b", Quota: 5, Window: time.Minute, Key: func(*core.Request) (string, error) { return "k", nil }}}})
	for _, style := range []core.HeaderStyle{core.HeadersIETF, core.HeadersDraft, core.HeadersX, core.HeadersXEpoch} {
		l := e.MustLayer(core.Use("b"), core.WithHeaders(style))
		var d core.Decision
		l.Decide(&core.Request{}, &d)
		f := l.Fields(&d)
		if f.Len() == 0 {
			t.Fatalf("%s: no fields", style)
		}
		for i := 0; i < f.Len(); i++ {
			if name, _ := f.Field(i); int(fieldIndex(name)) == len(fieldNames) {
				t.Errorf("%s: field %s has no index", style, name)
			}
		}
	}
}
