package tenantapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer op-acme-alice", "bearer  x", "Bearer ", "Bearer a==", "Bearer ==", "Basic x", "Bearer a b", "Bearer\tx", "Bearer é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, ok := BearerToken(s)
		if !ok {
			if tok != "" {
				t.Fatalf("rejected %q but returned %q", s, tok)
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") || len(tok) > 256 {
			t.Fatalf("BearerToken(%q) = %q", s, tok)
		}
		if !strings.EqualFold(s[:7], "Bearer ") || !strings.HasSuffix(s, tok) {
			t.Fatalf("BearerToken(%q) = %q: not the value's token", s, tok)
		}
		if again, ok := BearerToken("Bearer " + tok); !ok || again != tok {
			t.Fatalf("token %q does not round-trip: %q %v", tok, again, ok)
		}
	})
}

func FuzzParseBulkDisable(f *testing.F) {
	for _, s := range []string{`{"ids":["u1","u2"]}`, `{"ids":[]}`, `{"ids":["u1",2]}`, `{"ids":["a"],"x":1}`, `{"ids":["a"]}{}`, `{"ids":null}`, `{"ids":["\u00e9"]}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := ParseBulkDisable(body)
		if err != nil {
			if ids != nil {
				t.Fatalf("error %v with ids %q", err, ids)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if len(ids) < 1 || len(ids) > MaxBulkIDs {
			t.Fatalf("accepted %d ids", len(ids))
		}
		for _, id := range ids {
			if id == "" || len(id) > 128 {
				t.Fatalf("accepted id %q", id)
			}
		}
		// What was accepted is what a strict reading of the same body says.
		var ref struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal(body, &ref); err != nil || !slices.Equal(ref.IDs, ids) {
			t.Fatalf("ids %q, reference %q (%v)", ids, ref.IDs, err)
		}
		again, err := json.Marshal(map[string][]string{"ids": ids})
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseBulkDisable(again); err != nil || !slices.Equal(back, ids) {
			t.Fatalf("ids %q do not round-trip: %q %v", ids, back, err)
		}
	})
}

func FuzzParseTrustedProxies(f *testing.F) {
	for _, s := range []string{"", " ", "10.0.0.0/8", "10.0.0.0/8, ::1", "a,,b", ",", "10.0.0.0/8,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTrustedProxies(s)
		if err != nil {
			return
		}
		if strings.TrimSpace(s) == "" {
			if got != nil {
				t.Fatalf("blank %q gave %q", s, got)
			}
			return
		}
		if len(got) != strings.Count(s, ",")+1 {
			t.Fatalf("%q gave %d entries", s, len(got))
		}
		for _, p := range got {
			if p == "" || p != strings.TrimSpace(p) || strings.Contains(p, ",") {
				t.Fatalf("%q gave entry %q", s, p)
			}
		}
		if again, err := ParseTrustedProxies(strings.Join(got, ",")); err != nil || !slices.Equal(again, got) {
			t.Fatalf("%q does not round-trip: %q %v", got, again, err)
		}
	})
}
