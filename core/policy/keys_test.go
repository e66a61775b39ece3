package policy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
)

type (
	tenantCtx   struct{}
	operatorCtx struct{}
)

func TestStandardKeys(t *testing.T) {
	hasher, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: keyfunc.Secret("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := StandardKeys(StandardKeyConfig{
		APIKey:        keyfunc.APIKeyConfig{Hasher: hasher, Header: "X-Api-Key"},
		TenantValue:   tenantCtx{},
		OperatorValue: operatorCtx{},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ip", "apikey", "tenant", "operator", "tenant+operator", "global"} {
		if keys[name] == nil {
			t.Errorf("no %q", name)
		}
	}
	if keys["subscriber"] != nil {
		t.Error(`"subscriber" without SubscriberValue`)
	}

	ctx := context.WithValue(context.WithValue(context.Background(), tenantCtx{}, "acme"), operatorCtx{}, "op7")
	r := &core.Request{Method: "POST", RemoteAddr: "192.0.2.7:1234", Header: http.Header{"X-Api-Key": {"secret-key"}}, Context: ctx}
	for name, want := range map[string]string{"ip": "192.0.2.7", "tenant": "acme", "global": "global"} {
		if got, err := keys[name](r); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if got, _ := keys["apikey"](r); got == "" || strings.Contains(got, "secret-key") {
		t.Errorf("apikey = %q: not a hash of the key", got)
	}
	a, _ := keys["tenant+operator"](r)
	r2 := *r
	r2.Context = context.WithValue(ctx, operatorCtx{}, "op8")
	if b, _ := keys["tenant+operator"](&r2); a == "" || a == b {
		t.Errorf("tenant+operator keys %q and %q", a, b)
	}
	if _, err := keys["tenant"](&core.Request{Context: context.Background()}); !errors.Is(err, core.ErrNoKey) {
		t.Errorf("no tenant: err = %v", err)
	}

	// A configuration names them; a missing one is reported.
	doc := "budgets:\n  t: {quota: 2, window: 1m, key: tenant}\n  c: {quota: 1, window: 1m, key: tenant+operator}\n  s: {quota: 1, window: 1m, key: subscriber}\n"
	_, err = Parse("k.yaml", []byte(doc), LoadConfig{Keys: keys})
	assertProblem(t, err, `k.yaml:4:34: budgets.s.key: unknown key function "subscriber"`)
	cfg, err := Parse("k.yaml", []byte(doc[:strings.Index(doc, "  s:")]), LoadConfig{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{SweepInterval: -1}), Budgets: cfg.Budgets()})
	l := eng.MustLayer(core.Use("t", "c"))
	if got := admitted(l, 5, func() *core.Request { return r }); got != 1 {
		t.Errorf("admitted %d, want 1 (c allows one per tenant and operator)", got)
	}
	if got := admitted(l, 5, func() *core.Request { return &r2 }); got != 1 {
		t.Errorf("another operator of the tenant: admitted %d, want 1 (t has one left)", got)
	}

	if _, err := StandardKeys(StandardKeyConfig{IP: keyfunc.IPConfig{TrustedProxies: []string{"not-a-cidr"}, Headers: []keyfunc.Source{keyfunc.XForwardedFor}}}); err == nil {
		t.Error("an invalid IP configuration was accepted")
	}
}
