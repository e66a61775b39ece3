package tenantapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/policy"
)

// quotas are the contract's numbers, worked out by hand: the reference
// quota × the tier's share, rounded up.
var quotas = []struct {
	tenant                                 string
	tier                                   string
	mutate, heavy, values, check, outbound int64
}{
	{"acme", "small", 75, 8, 150, 3, 2},     // 300×¼, 7.5→8, 600×¼, 2.5→3, 1.25→2
	{"hooli", "medium", 150, 15, 300, 5, 3}, // 2.5→3
	{"globex", "large", 300, 30, 600, 10, 5},
	{"initech", "xl", 600, 60, 1200, 20, 10},
	{"umbrella", "max", 1200, 120, 2400, 40, 20}, // cap 50, pinned to max
}

func newAPI(t *testing.T, env map[string]string) *API {
	t.Helper()
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	a, err := New(Config{Store: store, Env: mapEnv(env)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestQuotasPerTier(t *testing.T) {
	a := newAPI(t, nil)
	res := a.config.Resolver()
	for _, q := range quotas {
		tier, err := res.Tiers.Of(licences[q.tenant])
		if err != nil || tier.Name != q.tier {
			t.Errorf("%s: tier %q (%v), want %q", q.tenant, tier.Name, err, q.tier)
		}
		for budget, want := range map[string]int64{"t_mutate": q.mutate, "t_heavy": q.heavy, "t_values": q.values, "t_check": q.check, "t_outbound": q.outbound} {
			b, _ := a.Engine().Budget(budget)
			got, err := b.QuotaFunc(&core.Request{Context: context.Background()}, q.tenant)
			if err != nil || got != want {
				t.Errorf("%s %s: quota %d (%v), want %d", q.tenant, budget, got, err, want)
			}
		}
	}
	for name, want := range map[string]int64{"card_timeline": 20, "credential_issue": 5, "portal": 60, "public_login": 20, "public_forms": 20, "portal_zerologin": 120} {
		b, ok := a.Engine().Budget(name)
		if !ok || b.Quota != want || b.QuotaFunc != nil || b.Window.Seconds() != 60 {
			t.Errorf("budget %s: quota %d, window %v, scaled %v; want flat %d per minute", name, b.Quota, b.Window, b.QuotaFunc != nil, want)
		}
	}
	if b, _ := a.Engine().Budget("t_mutate"); strings.Join(b.IgnoreMethods, ",") != "GET,HEAD,OPTIONS" {
		t.Errorf("t_mutate ignores %v", b.IgnoreMethods)
	}
}

func TestRoutesAndLayers(t *testing.T) {
	a := newAPI(t, nil)
	want := map[string]string{
		"GET /api/reports/{name}":      "t_mutate,t_heavy",
		"POST /api/exports":            "t_mutate,t_heavy",
		"GET /api/dashboard/values":    "t_mutate,t_values",
		"POST /api/checks":             "t_mutate,t_check",
		"POST /api/outbound":           "t_mutate,t_outbound",
		"POST /api/users/{id}/disable": "t_mutate",
		"POST /api/users/bulk-disable": "t_mutate",
		"GET /api/users":               "t_mutate",
		"GET /api/cards/{id}/timeline": "t_mutate,card_timeline",
		"POST /api/credentials":        "t_mutate,credential_issue",
		"GET /portal/me":               "portal",
		"POST /portal/topup":           "portal",
		"POST /portal/zerologin":       "portal_zerologin",
		"POST /public/login":           "public_login",
		"POST /public/signup":          "public_signup",
		"GET /public/resolve-host":     "public_resolve_host",
		"GET /public/slug-available":   "public_slug_available",
		"GET /public/captcha":          "public_captcha",
		"POST /public/payment-return":  "public_payment_return",
		"POST /public/forms":           "public_forms",
	}
	got := map[string]string{}
	for _, r := range a.Routes() {
		got[r.Method+" "+r.Path] = strings.Join(r.Layer.Budgets(), ",")
		access := Public
		switch {
		case strings.HasPrefix(r.Path, "/api/"):
			access = OperatorOnly
		case strings.HasPrefix(r.Path, "/portal/") && r.Path != "/portal/zerologin":
			access = SubscriberOnly
		}
		if r.Access != access {
			t.Errorf("%s %s: access %d, want %d", r.Method, r.Path, r.Access, access)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d routes, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s spends %q, want %q", k, got[k], v)
		}
	}
}

func TestColonPath(t *testing.T) {
	for in, want := range map[string]string{
		"/api/cards/{id}/timeline": "/api/cards/:id/timeline",
		"/api/reports/{name}":      "/api/reports/:name",
		"/public/login":            "/public/login",
	} {
		if got := (Route{Path: in}).ColonPath(); got != want {
			t.Errorf("ColonPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	for _, c := range []struct {
		access Access
		auth   []string
		want   Identity
		ok     bool
	}{
		{OperatorOnly, []string{"Bearer op-acme-alice"}, Identity{Tenant: "acme", Operator: "alice"}, true},
		{OperatorOnly, []string{"bearer  op-hooli-hank"}, Identity{Tenant: "hooli", Operator: "hank"}, true},
		{OperatorOnly, nil, Identity{}, false},
		{OperatorOnly, []string{""}, Identity{}, false},
		{OperatorOnly, []string{"Bearer op-acme-mallory"}, Identity{}, false},
		{OperatorOnly, []string{"Basic b3AtYWNtZS1hbGljZQ=="}, Identity{}, false},
		{OperatorOnly, []string{"Bearer op-acme-alice", "Bearer op-acme-alice"}, Identity{}, false},
		{OperatorOnly, []string{"Bearer op-acme-alice extra"}, Identity{}, false},
		{OperatorOnly, []string{"Bearer sub-acme-1001"}, Identity{}, false},
		{SubscriberOnly, []string{"Bearer sub-acme-1001"}, Identity{Tenant: "acme", Subscriber: "1001"}, true},
		{SubscriberOnly, []string{"Bearer op-acme-alice"}, Identity{}, false},
		{Public, nil, Identity{}, true},
		{Public, []string{"Bearer op-acme-alice"}, Identity{}, true},
	} {
		got, ok := Authenticate(c.access, c.auth)
		if got != c.want || ok != c.ok {
			t.Errorf("Authenticate(%d, %q) = %+v, %v; want %+v, %v", c.access, c.auth, got, ok, c.want, c.ok)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":       "abc",
		"BEARER a.b-c_~+/": "a.b-c_~+/",
		"Bearer abc==":     "abc==",
		"Bearer ":          "",
		"Bearer ==":        "",
		"Bearer a=b":       "",
		"Bearer a b":       "",
		"Bearerabc":        "",
		"Token abc":        "",
		"Bearer \tabc":     "",
		"Bearer é":         "",
	} {
		got, ok := BearerToken(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

var denialBody = regexp.MustCompile(`^\{"error":\{"code":"ERR_RATE_LIMITED","message":"Too many requests\. Please slow down and try again shortly\.","request_id":"([0-9a-f]{16})","details":\{"reason":"rate_limited"\}\}\}$`)

func TestDeny(t *testing.T) {
	ids := map[string]bool{}
	for range 1000 {
		d := Deny(nil, &core.Decision{Reason: core.ReasonRateLimited, DeniedBy: "t_mutate"})
		m := denialBody.FindSubmatch(d.Body)
		if d.Status != http.StatusTooManyRequests || m == nil {
			t.Fatalf("denial %d %s", d.Status, d.Body)
		}
		if d.Header.Get("Content-Type") != "application/json" || d.Header.Get("Retry-After") != "" {
			t.Fatalf("denial headers %v", d.Header)
		}
		for name := range d.Header {
			if strings.Contains(strings.ToLower(name), "ratelimit") {
				t.Fatalf("denial header %s", name)
			}
		}
		if ids[string(m[1])] {
			t.Fatalf("request id %s repeated", m[1])
		}
		ids[string(m[1])] = true
	}
	if d := Deny(nil, &core.Decision{Reason: core.ReasonNoKey}); d.Status != 401 || !strings.Contains(string(d.Body), `"code":"ERR_UNAUTHORIZED"`) {
		t.Errorf("no-key denial %d %s", d.Status, d.Body)
	}
	var e apiError
	if err := json.Unmarshal(Unauthorized().Body, &e); err != nil || e.Error.Code != "ERR_UNAUTHORIZED" || e.Error.RequestID == "" || e.Error.Details.Reason != "unauthenticated" {
		t.Errorf("401 body %s (%v)", Unauthorized().Body, err)
	}
}

func TestParseBulkDisable(t *testing.T) {
	many := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = `"u` + strings.Repeat("1", 1+i%5) + `"`
		}
		return `{"ids":[` + strings.Join(ids, ",") + `]}`
	}
	for body, want := range map[string]int{
		`{"ids":["u1","u2"]}`:  2,
		` {"ids":["u1"]} `:     1,
		many(500):              500,
		many(501):              -1,
		`{"ids":[]}`:           -1,
		`{}`:                   -1,
		`{"ids":null}`:         -1,
		`{"ids":["u1",2]}`:     -1,
		`{"ids":["u1",null]}`:  -1,
		`{"ids":[""]}`:         -1,
		`{"ids":["u1"],"x":1}`: -1,
		`{"ids":["u1"]}{}`:     -1,
		`{"ids":["u1"]}]`:      -1,
		`["u1"]`:               -1,
		``:                     -1,
		`{"ids":"u1"}`:         -1,
		`{"ids":["` + strings.Repeat("a", 129) + `"]}`: -1,
	} {
		ids, err := ParseBulkDisable([]byte(body))
		switch {
		case want < 0 && err == nil:
			t.Errorf("ParseBulkDisable(%.60q) = %d ids, want an error", body, len(ids))
		case want >= 0 && (err != nil || len(ids) != want):
			t.Errorf("ParseBulkDisable(%.60q) = %d ids, %v; want %d", body, len(ids), err, want)
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "",
		"  ":                              "",
		"10.0.0.0/8":                      "10.0.0.0/8",
		" 10.0.0.0/8 , 192.0.2.1,::1/128": "10.0.0.0/8|192.0.2.1|::1/128",
		"10.0.0.0/8,":                     "error",
		",10.0.0.0/8":                     "error",
		"a,,b":                            "error",
	} {
		got, err := ParseTrustedProxies(in)
		s := strings.Join(got, "|")
		if err != nil {
			s = "error"
		}
		if s != want {
			t.Errorf("ParseTrustedProxies(%q) = %q (%v), want %q", in, s, err, want)
		}
	}
}

func TestNewRejectsInvalidEnvironment(t *testing.T) {
	store := memstore.MustNew(memstore.Config{SweepInterval: -1})
	defer store.Close()
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{EnvPublicLimit: "twenty"}, []string{`PUBLIC_RATE_LIMIT="twenty"`}},
		{map[string]string{EnvPublicLimit: "0"}, []string{`PUBLIC_RATE_LIMIT="0"`}},
		{map[string]string{EnvPublicLimit: "-5"}, []string{`PUBLIC_RATE_LIMIT="-5"`}},
		{map[string]string{EnvPublicLimit: ""}, []string{`PUBLIC_RATE_LIMIT=""`}},
		{map[string]string{EnvPublicWindow: "60"}, []string{`PUBLIC_RATE_WINDOW="60"`}},
		{map[string]string{EnvPublicWindow: "-1m"}, []string{`PUBLIC_RATE_WINDOW="-1m"`}},
		{map[string]string{EnvZeroLoginLimit: "1e3"}, []string{`PORTAL_ZEROLOGIN_RATE_LIMIT="1e3"`}},
		{map[string]string{EnvZeroLoginLimit: "0"}, []string{`PORTAL_ZEROLOGIN_RATE_LIMIT="0"`}},
		{map[string]string{EnvTrustedProxies: "10.0.0.0/33"}, []string{`TRUSTED_PROXIES="10.0.0.0/33"`}},
		{map[string]string{EnvTrustedProxies: "proxy.internal"}, []string{`TRUSTED_PROXIES="proxy.internal"`}},
		{map[string]string{EnvPublicLimit: "x", EnvPublicWindow: "y", EnvTrustedProxies: "z"},
			[]string{`PUBLIC_RATE_LIMIT="x"`, `PUBLIC_RATE_WINDOW="y"`, `TRUSTED_PROXIES="z"`}},
	} {
		_, err := New(Config{Store: store, Env: mapEnv(c.env)})
		var ce *ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) != len(c.want) {
			t.Errorf("New with %v: %v, want %d problems", c.env, err, len(c.want))
			continue
		}
		for _, w := range c.want {
			if strings.Count(err.Error(), w) != 1 {
				t.Errorf("New with %v: %q should name %s once", c.env, err, w)
			}
		}
	}
}

func TestNewAppliesEnvironment(t *testing.T) {
	a := newAPI(t, map[string]string{EnvPublicLimit: "7", EnvPublicWindow: "90s", EnvZeroLoginLimit: "300", EnvTrustedProxies: "10.0.0.0/8"})
	for _, name := range []string{"public_login", "public_signup", "public_resolve_host", "public_slug_available", "public_captcha", "public_payment_return", "public_forms"} {
		b, _ := a.Engine().Budget(name)
		if b.Quota != 7 || b.Window.Seconds() != 90 {
			t.Errorf("%s: %d per %v, want 7 per 90s", name, b.Quota, b.Window)
		}
	}
	if b, _ := a.Engine().Budget("portal_zerologin"); b.Quota != 300 || b.Window.Seconds() != 60 {
		t.Errorf("portal_zerologin: %d per %v, want 300 per 1m", b.Quota, b.Window)
	}
	// The IP key believes X-Forwarded-For from 10.0.0.0/8 only.
	b, _ := a.Engine().Budget("public_login")
	hdr := http.Header{"X-Forwarded-For": {"203.0.113.9"}}
	for peer, want := range map[string]string{"10.1.2.3:5000": "203.0.113.9", "192.0.2.1:5000": "192.0.2.1"} {
		if k, err := b.Key(&core.Request{RemoteAddr: peer, Header: hdr}); k != want || err != nil {
			t.Errorf("key from %s: %q %v, want %q", peer, k, err, want)
		}
	}
}

func TestSubjectsOfEveryTenant(t *testing.T) {
	for tenant := range licences {
		if _, err := lookupLicence(context.Background(), tenant); err != nil {
			t.Error(err)
		}
	}
	if _, err := lookupLicence(context.Background(), "nobody"); err == nil {
		t.Error("a tenant without a licence has a subject")
	}
	for token, id := range credentials {
		if _, ok := licences[id.Tenant]; !ok {
			t.Errorf("token %s: tenant %s has no licence", token, id.Tenant)
		}
	}
	var _ policy.LookupFunc = lookupLicence
}
