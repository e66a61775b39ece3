package keyfunc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
)

type ctxKey string

type tenantID struct{ id string }

func (t *tenantID) String() string { return "tenant-" + t.id }

type opaque struct{ n int }

func TestValueTypes(t *testing.T) {
	var nilTenant *tenantID
	cases := []struct {
		name    string
		v       any
		want    string
		wantErr error
	}{
		{"string", "acme", "acme", nil},
		{"bytes", []byte("acme"), "acme", nil},
		{"int", 42, "42", nil},
		{"int64", int64(-7), "-7", nil},
		{"int32", int32(7), "7", nil},
		{"uint", uint(8), "8", nil},
		{"uint64", uint64(1 << 63), "9223372036854775808", nil},
		{"uint32", uint32(9), "9", nil},
		{"stringer", &tenantID{"x"}, "tenant-x", nil},
		{"nil stringer pointer", nilTenant, "", core.ErrNoKey},
		{"nil", nil, "", core.ErrNoKey},
		{"empty", "", "", core.ErrNoKey},
		{"longest", strings.Repeat("t", MaxValueLen), strings.Repeat("t", MaxValueLen), nil},
		{"too long", strings.Repeat("t", MaxValueLen+1), "", ErrMalformed},
		{"unsupported", opaque{1}, "", ErrUnsupportedValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := request("192.0.2.1:1")
			r.Values = mapValues{"tenant": c.v}
			got, err := Tenant("tenant")(r)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !errors.Is(err, core.ErrNoKey) {
					t.Fatalf("%q, %v; want an error wrapping %v and core.ErrNoKey", got, err, c.wantErr)
				}
				if !strings.Contains(err.Error(), "tenant") {
					t.Fatalf("error %q does not name the tenant", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestValueFromContext(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey("op"), "alice")
	r := &core.Request{Context: ctx}
	got, err := Operator(ctxKey("op"))(r)
	if err != nil || got != "alice" {
		t.Fatalf("Operator from context: %q, %v", got, err)
	}
	// Values shadow the context.
	r.Values = mapValues{ctxKey("op"): "bob"}
	if got, _ := Operator(ctxKey("op"))(r); got != "bob" {
		t.Fatalf("Values did not take precedence: %q", got)
	}
	// A string key is not the same key as a typed one.
	if _, err := Operator("op")(r); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("an untyped key matched a typed one: %v", err)
	}
	_, err = Subscriber(ctxKey("sub"))(r)
	if !errors.Is(err, core.ErrNoKey) || !strings.Contains(err.Error(), "subscriber") {
		t.Fatalf("missing subscriber: %v", err)
	}
}

func TestFuncs(t *testing.T) {
	fn := func(r *core.Request) (string, bool) {
		if r.Path == "/anon" {
			return "", false
		}
		return "id-" + r.Path[1:], true
	}
	for _, c := range []struct {
		kf   core.KeyFunc
		kind string
	}{{TenantFunc(fn), "tenant"}, {OperatorFunc(fn), "operator"}, {SubscriberFunc(fn), "subscriber"}, {Func("", fn), "identity"}} {
		got, err := c.kf(&core.Request{Path: "/7"})
		if err != nil || got != "id-7" {
			t.Fatalf("%s: %q, %v", c.kind, got, err)
		}
		_, err = c.kf(&core.Request{Path: "/anon"})
		if !errors.Is(err, core.ErrNoKey) || !strings.Contains(err.Error(), c.kind) {
			t.Fatalf("%s: error %v", c.kind, err)
		}
	}
	// ok with an empty string is still no key.
	if _, err := Func("x", func(*core.Request) (string, bool) { return "", true })(&core.Request{}); !errors.Is(err, core.ErrNoKey) {
		t.Fatalf("empty identity: %v", err)
	}
}

func TestValuePanicsAtConstruction(t *testing.T) {
	for name, f := range map[string]func(){
		"Value nil key":     func() { Value("tenant", nil) },
		"Func nil":          func() { Func("tenant", nil) },
		"Composite empty":   func() { Composite() },
		"Composite nil":     func() { Composite(nil) },
		"FirstOf empty":     func() { FirstOf() },
		"FirstOf nil":       func() { FirstOf(Global(), nil) },
		"Hashed nil hasher": func() { Hashed(nil, Global()) },
		"Hashed nil key":    func() { Hashed(mustHasher(t, HashConfig{Secret: testSecret}), nil) },
		"Hashed zero":       func() { Hashed(&Hasher{}, Global()) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestValueAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts are checked without -short and -race")
	}
	kf := Tenant(ctxKey("tenant"))
	r := &core.Request{Context: context.WithValue(context.Background(), ctxKey("tenant"), "acme")}
	if n := testing.AllocsPerRun(200, func() { _, _ = kf(r) }); n != 0 {
		t.Errorf("tenant from context: %.1f allocs, want 0", n)
	}
	anon := &core.Request{Context: context.Background()}
	if n := testing.AllocsPerRun(200, func() { _, _ = kf(anon) }); n != 0 {
		t.Errorf("missing tenant: %.1f allocs, want 0", n)
	}
}
