package core_test

import (
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core"
)

func TestFailureModeNames(t *testing.T) {
	for m, name := range map[core.FailureMode]string{
		core.FailInherit: "inherit", core.FailOpen: "open", core.FailClosed: "closed", core.FailLocal: "local",
	} {
		if got := m.String(); got != name {
			t.Errorf("%d.String() = %q, want %q", int(m), got, name)
		}
		got, err := core.ParseFailureMode(name)
		if err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", name, got, err, m)
		}
	}
	if got := core.FailureMode(9).String(); got != "FailureMode(9)" {
		t.Errorf("unknown mode prints %q", got)
	}
	for _, bad := range []string{"", "Open", "fail_open", "closed ", "FailureMode(1)"} {
		if _, err := core.ParseFailureMode(bad); err == nil || !strings.Contains(err.Error(), "want inherit, open, closed or local") {
			t.Errorf("ParseFailureMode(%q) error = %v", bad, err)
		}
	}
}

func TestMissingKeyNames(t *testing.T) {
	for m, name := range map[core.MissingKey]string{
		core.MissingKeyDeny: "deny", core.MissingKeySkip: "skip", core.MissingKeyFallback: "fallback",
	} {
		if got := m.String(); got != name {
			t.Errorf("%d.String() = %q, want %q", int(m), got, name)
		}
		got, err := core.ParseMissingKey(name)
		if err != nil || got != m {
			t.Errorf("ParseMissingKey(%q) = %v, %v; want %v", name, got, err, m)
		}
	}
	if got := core.MissingKey(-1).String(); got != "MissingKey(-1)" {
		t.Errorf("unknown action prints %q", got)
	}
	for _, bad := range []string{"", "Deny", "allow", " skip"} {
		if _, err := core.ParseMissingKey(bad); err == nil || !strings.Contains(err.Error(), "want deny, skip or fallback") {
			t.Errorf("ParseMissingKey(%q) error = %v", bad, err)
		}
	}
}

// FuzzParseNames checks that every name a Parse function accepts is the
// String of what it returns, and that nothing else is accepted.
func FuzzParseNames(f *testing.F) {
	for _, s := range []string{"inherit", "open", "closed", "local", "deny", "skip", "fallback", "", "Open", "fixed_window"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if m, err := core.ParseFailureMode(s); err == nil && m.String() != s {
			t.Errorf("ParseFailureMode(%q) = %v, which prints %q", s, m, m.String())
		}
		if m, err := core.ParseMissingKey(s); err == nil && m.String() != s {
			t.Errorf("ParseMissingKey(%q) = %v, which prints %q", s, m, m.String())
		}
	})
}
