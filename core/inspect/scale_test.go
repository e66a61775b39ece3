package inspect_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/inspect"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/scale"
	"github.com/quotagate/quotagate/keyfunc"
)

// TestScaledBudgetOnThePage: the page shows a scaled budget's current
// scale and the quota at that scale, in JSON and HTML, and nothing for an
// unscaled budget; a lookup shows the scaled quota.
func TestScaledBudgetOnThePage(t *testing.T) {
	p, err := scale.ParsePeriod("00:00-24:00")
	if err != nil {
		t.Fatal(err)
	}
	p.Scale = 0.35
	half := scale.MustNew(scale.Config{Schedule: []scale.Period{p}})
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	eng := core.MustNew(core.Config{Store: store, Budgets: []core.Budget{
		{Name: "scaled", Quota: 10, Window: time.Minute, Key: keyfunc.PeerIP(), Scale: half},
		{Name: "plain", Quota: 10, Window: time.Minute, Key: keyfunc.PeerIP()},
	}})
	srv := httptest.NewServer(inspect.MustNew(inspect.Config{Engine: eng, Authorize: inspect.Loopback}))
	defer srv.Close()

	var rep struct {
		Budgets []struct {
			Name        string
			Quota       int64
			Scale       *float64
			ScaledQuota int64 `json:"scaled_quota"`
		}
		Lookup struct {
			Budgets []struct {
				Budget string
				Quota  int64
			}
		}
	}
	code, _, body := get(t, srv.URL+"?format=json&key=192.0.2.1")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if err := jsonDecode(body, &rep); err != nil {
		t.Fatal(err)
	}
	if s := rep.Budgets[1]; s.Name != "scaled" || s.Quota != 10 || s.Scale == nil || *s.Scale != 0.35 || s.ScaledQuota != 3 {
		t.Errorf("scaled budget: %+v (scale %v), want quota 10, scale 0.35, scaled quota 3", s, deref(s.Scale))
	}
	if s := rep.Budgets[0]; s.Name != "plain" || s.Scale != nil || s.ScaledQuota != 0 || !strings.Contains(body, `"name": "plain"`) || strings.Count(body, `"scale"`) != 1 {
		t.Errorf("unscaled budget: %+v, want no scale in JSON", s)
	}
	if l := rep.Lookup.Budgets; len(l) != 2 || l[0].Budget != "plain" || l[0].Quota != 10 || l[1].Quota != 3 {
		t.Errorf("lookup: %+v, want the scaled quota 3 and the plain 10", l)
	}
	_, _, html := get(t, srv.URL)
	if !strings.Contains(html, `<td class="n scale">35% (quota 3)</td>`) || !strings.Contains(html, `<td class="n scale"></td>`) {
		t.Errorf("HTML lacks the scale of the scaled budget, or shows one for the plain budget:\n%s", html)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func jsonDecode(body string, v any) error { return json.Unmarshal([]byte(body), v) }
