package keyfunc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/quotagate/quotagate/core"
)

func fixed(s string) core.KeyFunc { return Constant(s) }

func TestComposite(t *testing.T) {
	cases := []struct {
		parts []string
		want  string
	}{
		{[]string{"acme", "alice"}, "acme|alice"},
		{[]string{"a|b", "c"}, `a\|b|c`},
		{[]string{"a", "b|c"}, `a|b\|c`},
		{[]string{`a\`, "b"}, `a\\|b`},
		{[]string{"a", `\b`}, `a|\\b`},
		{[]string{"", ""}, "|"},
		{[]string{"2001:db8::/64", "x"}, "2001:db8::/64|x"},
		{[]string{"solo"}, "solo"},
	}
	for _, c := range cases {
		parts := make([]core.KeyFunc, len(c.parts))
		for i, p := range c.parts {
			parts[i] = fixed(p)
		}
		got, err := Composite(parts...)(&core.Request{})
		if err != nil || got != c.want {
			t.Errorf("Composite(%q) = %q, %v; want %q", c.parts, got, err, c.want)
		}
		back, ok := SplitComposite(got)
		if !ok || fmt.Sprint(back) != fmt.Sprint(c.parts) {
			t.Errorf("SplitComposite(%q) = %q, %v; want %q", got, back, ok, c.parts)
		}
	}
	for _, bad := range []string{`a\`, `a\b`, `\`} {
		if _, ok := SplitComposite(bad); ok {
			t.Errorf("SplitComposite(%q) accepted a malformed key", bad)
		}
	}
}

// TestCompositeInjective checks on random tuples over the awkward alphabet
// that distinct tuples never share a key.
func TestCompositeInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{'a', '|', '\\', ':'}
	word := func() string {
		b := make([]byte, rng.IntN(4))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	seen := map[string][2]string{}
	for range 20000 {
		a, b := word(), word()
		k, err := Composite(fixed(a), fixed(b))(&core.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[k]; ok && prev != [2]string{a, b} {
			t.Fatalf("(%q, %q) and (%q, %q) share key %q", prev[0], prev[1], a, b, k)
		}
		seen[k] = [2]string{a, b}
	}
}

func TestCompositeMissingPart(t *testing.T) {
	kf := Composite(Tenant("tenant"), Operator("operator"))
	r := request("192.0.2.1:1")
	r.Values = mapValues{"tenant": "acme"}
	_, err := kf(r)
	if !errors.Is(err, core.ErrNoKey) || err.Error() != "keyfunc: no operator in the request" {
		t.Fatalf("missing operator: %v", err)
	}
	r.Values = mapValues{"tenant": "acme", "operator": "alice"}
	if got, err := kf(r); err != nil || got != "acme|alice" {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestConstantAndGlobal(t *testing.T) {
	if k, err := Global()(nil); err != nil || k != "global" {
		t.Fatalf("Global: %q, %v", k, err)
	}
	if k, err := Constant("anon")(&core.Request{}); err != nil || k != "anon" {
		t.Fatalf("Constant: %q, %v", k, err)
	}
}

func TestFirstOf(t *testing.T) {
	ip := PeerIP()
	kf := FirstOf(Tenant("tenant"), ip)
	r := request("192.0.2.1:1")
	if got, err := kf(r); err != nil || got != "1:192.0.2.1" {
		t.Fatalf("anonymous: %q, %v; want the IP alternative", got, err)
	}
	r.Values = mapValues{"tenant": "acme"}
	if got, err := kf(r); err != nil || got != "0:acme" {
		t.Fatalf("authenticated: %q, %v; want the tenant", got, err)
	}
	// A tenant named like an address does not share that address's budget.
	r.Values = mapValues{"tenant": "192.0.2.1"}
	tenantKey, _ := kf(r)
	ipKey, _ := kf(request("192.0.2.1:1"))
	if tenantKey == ipKey {
		t.Fatalf("tenant %q and address share key %q", "192.0.2.1", ipKey)
	}
	// None has a key: the last alternative's error.
	_, err := FirstOf(Tenant("tenant"), ip)(request("junk"))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("no alternative: %v; want the IP key's error", err)
	}
	// Errors other than ErrNoKey stop the search.
	boom := errors.New("boom")
	failing := func(*core.Request) (string, error) { return "", boom }
	if _, err := FirstOf(failing, Global())(r); err != boom {
		t.Fatalf("a non-ErrNoKey error was passed over: %v", err)
	}
}

func TestComposeAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts are checked without -short and -race")
	}
	r := request("192.0.2.1:1")
	r.Values = mapValues{"tenant": "acme", "operator": "alice"}
	comp := Composite(Tenant("tenant"), Operator("operator"))
	first := FirstOf(Tenant("missing"), PeerIP())
	for name, kf := range map[string]core.KeyFunc{"composite": comp, "firstof": first, "global": Global()} {
		max := 1.0
		if name == "global" {
			max = 0
		}
		if n := testing.AllocsPerRun(200, func() { _, _ = kf(r) }); n > max {
			t.Errorf("%s: %.1f allocs, want at most %.0f", name, n, max)
		}
	}
}
