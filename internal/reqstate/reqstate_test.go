package reqstate

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestLastLayerOutReleases(t *testing.T) {
	c, st, slot, created, r := Enter[int](httptest.NewRequest("GET", "/", nil))
	if !created || st == nil {
		t.Fatal("no state created")
	}
	ctx := r.Context()
	inner, st2, slot2, created2, _ := Enter[int](r)
	if inner != c || st2 != st || slot2 != slot || created2 {
		t.Fatal("an inner layer did not find the outer layer's state and slot")
	}
	other, st3, slot3, created3, _ := Enter[string](r)
	if other != c || st3 != st || slot3 == nil || created3 {
		t.Fatal("a layer of another adapter did not find the outer layer's state")
	}
	other.Leave(false)
	if !c.Use() {
		t.Fatal("the router's context is not usable while the first layer runs")
	}
	c.Release()
	c.Leave(true) // the outer layer returns first (a timeout middleware)
	if c.Use() {
		t.Fatal("the router's context is usable after the first layer returned")
	}
	c.Release()
	if Decision(ctx) == nil {
		t.Fatal("state released while an inner layer still holds it")
	}
	inner.Leave(false)
	if Decision(ctx) != nil {
		t.Fatal("state not released by the last layer out")
	}
	if _, st4, _, _, _ := Enter[int](r); st4 != nil {
		t.Fatal("a layer entered a finished request")
	}
	if _, st4, _, _, _ := Enter[string](r); st4 != nil {
		t.Fatal("a layer of another adapter entered a finished request")
	}
}

func TestConcurrentEnterLeave(t *testing.T) {
	c, _, _, _, r := Enter[int](httptest.NewRequest("GET", "/", nil))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if cc, st, _, _, _ := Enter[int](r); st != nil {
					_ = st.Decision.Allowed
					cc.Leave(false)
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	c.Leave(true)
	wg.Wait()
	if Decision(r.Context()) != nil {
		t.Fatal("state not released")
	}
}

// The first layer's values alias the Context's own array and are never
// written again; a later layer's get storage of their own, so the first
// header map keeps its values.
func TestHeaderValuesOfTwoLayers(t *testing.T) {
	c, _, _, _, _ := Enter[int](httptest.NewRequest("GET", "/", nil))
	defer c.Leave(true)
	h1, h2 := http.Header{}, http.Header{}
	first := Header{H: h1, C: c, First: true}
	buf := append(first.FieldBuffer(), "one"...)
	first.SetHeader("A", string(buf))
	later := Header{H: h2, C: c}
	buf2 := append(later.FieldBuffer(), "two"...)
	later.SetHeader("A", string(buf2))
	later.DelHeader("B")
	if h1.Get("A") != "one" || h2.Get("A") != "two" {
		t.Fatalf("values: first %q, later %q", h1.Get("A"), h2.Get("A"))
	}
	if n := testing.AllocsPerRun(100, func() {
		first.n = 0
		first.SetHeader("A", "x")
	}); n != 0 {
		t.Errorf("first layer's SetHeader allocates %v times", n)
	}
}
