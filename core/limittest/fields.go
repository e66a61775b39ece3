package limittest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
)

// member is one list member of a RateLimit-Policy or RateLimit field, as
// an independent RFC 9651 parser reads it.
type member struct {
	name   string
	params map[string]int64
}

// members parses field (every field line of it) as an RFC 9651 list whose
// members are sf-string items with non-negative integer parameters, each
// named in required or optional, every required one present. It reports
// every departure from that shape and returns what it could read. A
// missing field is an empty list.
func members(t reporter, r response, field string, required []string, optional ...string) []member {
	t.Helper()
	lines := r.Header.Values(field)
	if len(lines) == 0 {
		return nil
	}
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		t.Errorf("%s %q is not an RFC 9651 list: %v", field, lines, err)
		return nil
	}
	out := make([]member, 0, len(list))
	for i, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Errorf("%s member %d is an inner list, want an item", field, i)
			continue
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Errorf("%s member %d is %T %v, want an sf-string", field, i, it.Value, it.Value)
			continue
		}
		mb := member{name: name, params: map[string]int64{}}
		for _, p := range it.Params.Names() {
			v, _ := it.Params.Get(p)
			n, ok := v.(int64)
			switch {
			case !ok:
				t.Errorf("%s %q: parameter %s is %T %v, want an integer", field, name, p, v, v)
			case n < 0:
				t.Errorf("%s %q: parameter %s = %d is negative", field, name, p, n)
			case !contains(required, p) && !contains(optional, p):
				t.Errorf("%s %q: unexpected parameter %s", field, name, p)
			}
			mb.params[p] = n
		}
		for _, p := range required {
			if _, ok := mb.params[p]; !ok {
				t.Errorf("%s %q: no %s parameter", field, name, p)
			}
		}
		out = append(out, mb)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// names returns the members' names, in order.
func names(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}

// limits parses the RateLimit field of r and returns the members' names
// and the r parameter of each.
func limits(t reporter, r response) ([]string, map[string]int64) {
	t.Helper()
	ms := members(t, r, "RateLimit", []string{"r"}, "t")
	rem := make(map[string]int64, len(ms))
	for _, m := range ms {
		rem[m.name] = m.params["r"]
	}
	return names(ms), rem
}

// wantLimits reports unless r's RateLimit field lists exactly the budgets
// in order, with the given remaining units (budget, r, budget, r, ...).
func wantLimits(t reporter, r response, what string, want ...any) {
	t.Helper()
	got, rem := limits(t, r)
	var wantNames []string
	for i := 0; i+1 < len(want); i += 2 {
		wantNames = append(wantNames, want[i].(string))
	}
	if strings.Join(got, "|") != strings.Join(wantNames, "|") {
		t.Errorf("%s: RateLimit lists %q, want %q (field %q)", what, got, wantNames, r.Header.Values("RateLimit"))
		return
	}
	for i := 0; i+1 < len(want); i += 2 {
		name, n := want[i].(string), int64(want[i+1].(int))
		if rem[name] != n {
			t.Errorf("%s: %q r=%d, want %d (field %q)", what, name, rem[name], n, r.Header.Values("RateLimit"))
		}
	}
}

// sfString renders s as an RFC 9651 sf-string, independently of core.
func sfString(s string) string {
	return strconv.Quote(s) // printable ASCII: only '"' and '\' are escaped
}

// policy renders the expected RateLimit-Policy member of a budget.
func policy(name string, q, w int64) string {
	return fmt.Sprintf("%s;q=%d;w=%d", sfString(name), q, w)
}

// limit renders the expected RateLimit member of a budget.
func limit(name string, r, t int64) string {
	return fmt.Sprintf("%s;r=%d;t=%d", sfString(name), r, t)
}
