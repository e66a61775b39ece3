package observe_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/observe"
)

func TestLoggerRateLimitHoldsUnderFlood(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 5, Per: time.Second, Clock: c})
	e := newEngine(t, c, engineOpts{observer: lg},
		core.Budget{Name: "a", Quota: 1, Window: time.Hour, Key: remoteAddrKey, KeyClass: "ip"})
	l := e.MustLayer(core.Use("a"))

	const flood = 10_000
	denied := 0
	for range flood {
		if !decide(l, request("POST", "198.51.100.9:40000")).Allowed {
			denied++
		}
	}
	if denied != flood-1 {
		t.Fatalf("%d denied, want %d", denied, flood-1)
	}
	ls := lines(t, buf)
	if n := len(byEvent(ls, "denied")); n != 5 {
		t.Fatalf("flood of %d denials wrote %d denial lines, want 5 (the burst)", denied, n)
	}
	if n := len(byEvent(ls, "near_limit")); n != 1 {
		t.Fatalf("%d near-limit lines, want 1 (the one allowed request used the whole quota)", n)
	}
	if len(ls) != 6 {
		t.Fatalf("%d lines in all, want 6", len(ls))
	}
	if got := lg.Suppressed(); got != uint64(denied-5) {
		t.Fatalf("Suppressed() = %d, want %d", got, denied-5)
	}

	// One interval later, one more line, carrying the suppressed count.
	c.Advance(200 * time.Millisecond)
	decide(l, request("POST", "198.51.100.9:40000"))
	ls = lines(t, buf)
	d := byEvent(ls, "denied")
	if len(d) != 6 {
		t.Fatalf("%d denial lines after one interval, want 6", len(d))
	}
	if got := d[5]["suppressed"]; got != float64(denied-5) {
		t.Fatalf("line after the flood reports suppressed=%v, want %d", got, denied-5)
	}
	if got := suppressedSum(d[:5]); got != 0 {
		t.Fatalf("burst lines report suppressed=%d", got)
	}

	// A second burst without time passing: all suppressed, reported by Flush.
	for range 100 {
		decide(l, request("POST", "198.51.100.9:40000"))
	}
	if n := len(lines(t, buf)); n != 7 {
		t.Fatalf("%d lines after a suppressed burst, want 7", n)
	}
	if got := lg.Flush(); got != 100 {
		t.Fatalf("Flush reported %d, want 100", got)
	}
	if got := lg.Flush(); got != 0 {
		t.Fatalf("second Flush reported %d, want 0", got)
	}
	ls = lines(t, buf)
	last := ls[len(ls)-1]
	if last["msg"] != "quotagate: log lines suppressed" || last["event"] != "denied" || last["suppressed"] != float64(100) {
		t.Fatalf("flush line %v", last)
	}
	// Every denial is accounted for: written, or counted as suppressed.
	events := denied + 1 + 100
	written := len(byEvent(ls, "denied")) - 1 // the flush line is not an event
	if reported := suppressedSum(byEvent(ls, "denied")); written+int(reported) != events {
		t.Fatalf("%d lines + %d suppressed != %d denials", written, reported, events)
	}
}

func TestLoggerRateLimitConcurrent(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 7, Per: time.Minute, Clock: c})
	e := newEngine(t, c, engineOpts{observer: lg},
		core.Budget{Name: "a", Quota: 1, Window: time.Hour, Key: constKey})
	l := e.MustLayer(core.Use("a"))
	decide(l, request("GET", "10.0.0.1:1")) // uses the quota
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				decide(l, request("GET", "10.0.0."+string(rune('1'+w))+":1"))
			}
		})
	}
	wg.Wait()
	ls := lines(t, buf)
	if n := len(byEvent(ls, "denied")); n != 7 {
		t.Fatalf("%d concurrent denials wrote %d lines, want 7", workers*each, n)
	}
	if got := lg.Flush(); got != workers*each-7 {
		t.Fatalf("Flush reported %d, want %d", got, workers*each-7)
	}
}

func TestLoggerKindsAreLimitedSeparately(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 2, Per: time.Minute, Clock: c})
	for range 1000 {
		lg.ObserveDecision(request("GET", "10.0.0.1:1"), &core.Decision{Allowed: false, Reason: core.ReasonRateLimited, DeniedBy: "a"}, nil, 0)
	}
	lg.ObserveError(core.KindStoreError, "", errors.New("dial tcp 127.0.0.1:6379: connection refused"))
	lg.ObserveError(core.KindBreakerOpen, "", core.ErrBreakerOpen)
	lg.ObserveError(core.KindBudgetError, "q", errors.New("resolving quota: plan lookup failed"))
	ls := lines(t, buf)
	if n := len(byEvent(ls, "denied")); n != 2 {
		t.Fatalf("%d denial lines, want 2", n)
	}
	for _, ev := range []string{"store_error", "breaker_open", "budget_error"} {
		got := byEvent(ls, ev)
		if len(got) != 1 {
			t.Fatalf("after a denial flood, %d %s lines, want 1", len(got), ev)
		}
		if got[0]["level"] != "WARN" {
			t.Errorf("%s at level %v, want WARN", ev, got[0]["level"])
		}
	}
	if got := byEvent(ls, "budget_error")[0]["budget"]; got != "q" {
		t.Errorf("budget error names budget %v", got)
	}
}

// TestLoggerMisconfiguredOnce: a misconfigured store is written once, in
// full, at level ERROR, even when its kind's allowance is used up by
// nothing else; later errors of the kind are counted for Flush.
func TestLoggerMisconfiguredOnce(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 10, Per: time.Minute, Clock: c})
	err := fmt.Errorf("quotagate: redis store: take: %w", errors.Join(core.ErrMisconfigured, errors.New("MOVED 3999 127.0.0.1:7001")))
	for range 50 {
		lg.ObserveError(core.KindStoreMisconfigured, "", err)
		c.Advance(time.Minute) // no rate limit would hold these back
	}
	lg.ObserveError(core.KindStoreError, "", errors.New("dial tcp 127.0.0.1:6379: connection refused"))
	ls := lines(t, buf)
	got := byEvent(ls, "store_misconfigured")
	if len(got) != 1 || got[0]["level"] != "ERROR" || !strings.Contains(fmt.Sprint(got[0]["error"]), "MOVED 3999") {
		t.Fatalf("50 misconfiguration errors wrote %v, want one ERROR line with the reply", got)
	}
	if n := len(byEvent(ls, "store_error")); n != 1 {
		t.Errorf("%d store_error lines, want 1: a misconfiguration is not an outage", n)
	}
	if n := lg.Flush(); n != 49 {
		t.Errorf("Flush reported %d suppressed lines, want 49", n)
	}
}

func TestLoggerLevels(t *testing.T) {
	c := newClock()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		log, buf := jsonLogger(level)
		lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 100, Per: time.Minute, Clock: c})
		e := newEngine(t, c, engineOpts{observer: lg},
			core.Budget{Name: "t", Quota: 5, Window: time.Minute, Key: headerKey("X-Tenant"), MissingKey: core.MissingKeySkip},
			core.Budget{Name: "ip", Quota: 5, Window: time.Minute, Key: remoteAddrKey})
		l := e.MustLayer(core.Use("t", "ip"))
		r := request("GET", "10.0.0.1:1")
		r.Header = http.Header{}
		for range 3 {
			if !decide(l, r).Allowed {
				t.Fatal("denied")
			}
		}
		ls := lines(t, buf)
		want := 0
		if level == slog.LevelDebug {
			want = 3
		}
		if n := len(byEvent(ls, "no_key")); n != want {
			t.Errorf("level %v: %d no_key lines, want %d", level, n, want)
		}
		if lg.Suppressed() != 0 || lg.Flush() != 0 {
			t.Errorf("level %v: lines of a disabled level counted as suppressed", level)
		}
	}
}

func TestLoggerNeverLogsKeysPathsOrIPsByDefault(t *testing.T) {
	const secret = "sk_live_4f9a2c7e1b"
	const ip = "203.0.113.77"
	for _, withIP := range []bool{false, true} {
		c := newClock()
		log, buf := jsonLogger(slog.LevelDebug)
		lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 100, Per: time.Minute, Clock: c, ClientIP: withIP})
		ms, err := memstore.New(memstore.Config{Clock: c, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		fs := &faultStore{Store: ms}
		e := newEngine(t, c, engineOpts{observer: lg, store: fs},
			core.Budget{Name: "key", Quota: 3, Window: time.Minute, Key: headerKey("X-Api-Key"), KeyClass: "api_key"},
			core.Budget{Name: "shadow_ip", Quota: 1, Window: time.Minute, Key: remoteAddrKey, KeyClass: "ip", Shadow: true})
		l := e.MustLayer(core.Use("key", "shadow_ip"))
		r := request("POST", ip+":5555")
		r.Header = http.Header{"X-Api-Key": {secret}}
		for range 5 { // near limit, shadow denials, denials
			decide(l, r)
		}
		fs.fail(errors.New("i/o timeout"))
		decide(l, r) // store error
		r.Header = http.Header{}
		decide(l, r) // no key
		out := buf.String()
		ls := lines(t, buf)
		for _, ev := range []string{"denied", "shadow_denied", "near_limit", "store_error", "no_key"} {
			if len(byEvent(ls, ev)) == 0 {
				t.Fatalf("no %s line in\n%s", ev, out)
			}
		}
		if strings.Contains(out, secret) {
			t.Fatalf("the API key reached the log:\n%s", out)
		}
		if strings.Contains(out, "/items/42") {
			t.Fatalf("the raw path reached the log:\n%s", out)
		}
		if strings.Contains(out, ":5555") {
			t.Fatalf("the client port reached the log:\n%s", out)
		}
		if got := strings.Contains(out, ip); got != withIP {
			t.Fatalf("ClientIP=%v: client IP logged %v:\n%s", withIP, got, out)
		}
		den := byEvent(ls, "denied")[0]
		for k, v := range map[string]any{
			"level": "INFO", "reason": "rate_limited", "budget": "key", "key_class": "api_key",
			"method": "POST", "route": "/items/{id}", "quota": float64(3),
		} {
			if den[k] != v {
				t.Errorf("denial line %s = %v, want %v", k, den[k], v)
			}
		}
		if _, ok := den["retry_after"]; !ok {
			t.Error("denial line has no retry_after")
		}
		if withIP && den["client_ip"] != ip {
			t.Errorf("client_ip = %v", den["client_ip"])
		}
	}
}

func TestLoggerShadowAndDryRun(t *testing.T) {
	for _, dry := range []bool{false, true} {
		c := newClock()
		log, buf := jsonLogger(slog.LevelInfo)
		lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 100, Per: time.Minute, Clock: c, NearLimit: -1})
		e := newEngine(t, c, engineOpts{observer: lg, dryRun: dry},
			core.Budget{Name: "b", Quota: 2, Window: time.Minute, Key: remoteAddrKey, Shadow: !dry})
		l := e.MustLayer(core.Use("b"))
		for i := range 5 {
			if !decide(l, request("GET", "10.0.0.1:1")).Allowed {
				t.Fatalf("dry run %v: request %d denied", dry, i+1)
			}
		}
		ls := lines(t, buf)
		sh := byEvent(ls, "shadow_denied")
		if len(sh) != 3 || len(ls) != 3 {
			t.Fatalf("dry run %v: %d shadow lines of %d, want 3 of 3", dry, len(sh), len(ls))
		}
		if sh[0]["budget"] != "b" || sh[0]["remaining"] != float64(0) || sh[0]["msg"] != "quotagate: shadow budget would have denied" {
			t.Errorf("dry run %v: shadow line %v", dry, sh[0])
		}
	}
}

func TestLoggerOptions(t *testing.T) {
	for _, o := range []observe.LoggerConfig{{NearLimit: 1.5}, {Lines: -1}, {Per: -time.Second}} {
		if _, err := observe.NewLogger(nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := observe.NewLogger(nil, observe.LoggerConfig{}); err != nil {
		t.Fatal(err)
	}
}

func TestFlushEvery(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 1, Per: time.Hour, Clock: c})
	for range 4 {
		lg.ObserveError(core.KindStoreError, "", errors.New("down"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { lg.FlushEvery(ctx, time.Hour); close(done) }()
	cancel()
	<-done
	ls := byEvent(lines(t, buf), "store_error")
	if len(ls) != 2 || ls[1]["suppressed"] != float64(3) {
		t.Fatalf("store_error lines %v, want the first and a flush of 3", ls)
	}
}

func TestLoggerNamesAConcurrencyBudgetsLease(t *testing.T) {
	c := newClock()
	log, buf := jsonLogger(slog.LevelInfo)
	lg := observe.MustLogger(log, observe.LoggerConfig{Lines: 100, Per: time.Minute, Clock: c})
	e := newEngine(t, c, engineOpts{observer: lg},
		core.Budget{Name: "exports", Algorithm: core.Concurrency, Quota: 1, Window: 10 * time.Minute, Key: remoteAddrKey})
	l := e.MustLayer(core.Use("exports"))
	r := request("GET", "10.0.0.1:1")
	first := decide(l, r)
	defer first.Done(context.Background(), 0)
	if d := decide(l, r); d.Allowed {
		t.Fatal("a second request in flight was allowed with a quota of 1")
	}
	denied := byEvent(lines(t, buf), "denied")
	if len(denied) != 1 {
		t.Fatalf("%d denied lines, want 1", len(denied))
	}
	if _, ok := denied[0]["window"]; ok {
		t.Errorf("a concurrency budget's denial names a window: %v", denied[0])
	}
	if denied[0]["lease"] == nil {
		t.Errorf("a concurrency budget's denial does not name its lease: %v", denied[0])
	}
}
