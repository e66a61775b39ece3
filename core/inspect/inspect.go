// Package inspect is an inspection page for a quotagate engine: an
// [http.Handler] a service mounts where it mounts pprof or expvar, for the
// engineer answering "why am I getting 429s?".
//
// It shows every budget (algorithm, quota, window, burst, key class,
// failure mode, shadow, and, for a scaled budget, its current scale and
// the quota at that scale), the layers that spend each budget and what a
// request costs there, the routes seen spending it, the circuit breaker's state, the recent denials and
// store errors (kept by a [Recent] observer), and, for a key the operator
// types, what each budget holds for that key now: remaining, reset and the
// quota it resolved to. Looking a key up charges nothing (see
// core.Engine.Peek: on the memory store it only reads; on Redis it is one
// cost-0 run of the take script, which writes the partition's key back
// with its counts unchanged, adding count-0 records for window budgets it
// had none of).
//
// The same data is served as HTML for people and as JSON for scripts:
// add format=json to the query, or ask for application/json in Accept.
//
//	mux.Handle("/debug/quotagate", inspect.MustNew(inspect.Config{
//		Engine:    eng,
//		Recent:    recent, // also in the engine's Config.Observer
//		Authorize: inspect.Loopback,
//	}))
//
// # Security
//
// The page shows partition keys (client IPs, tenant ids, hashed API keys)
// and what every tenant's budgets hold. Nothing is served unless you
// mount the handler, and [New] refuses a Config without an Authorize
// check: decide who may see it (an operator's session, an internal
// network, [Loopback] for a local demo). A request Authorize refuses gets
// 403 and a body that says nothing about the engine. Do not mount it on a
// public listener behind an always-true check.
//
// # Cost
//
// The handler does its work only when it is requested: mounting it costs
// the request path nothing. The [Recent] observer costs an allowed request
// one call and a check, without allocating.
package inspect

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

// Config configures [New].
type Config struct {
	// Engine is the engine to inspect. Required.
	Engine *core.Engine
	// Authorize decides who may see the page; a request it refuses gets
	// 403 and nothing else. Required: a nil Authorize is a configuration
	// error, so that the page is never public by omission.
	Authorize func(r *http.Request) bool
	// Recent, when set, supplies the recent denials and store errors and
	// the routes that spend each budget. It must also be (part of) the
	// engine's Config.Observer to see them.
	Recent *Recent
	// Title names the engine on the page. Default "quotagate".
	Title string
	// LookupTimeout bounds a key lookup's store call. Default 2s.
	LookupTimeout time.Duration
}

// Handler serves the inspection page. Create it with [New].
type Handler struct {
	cfg Config
}

// New returns the inspection handler configured by cfg, or a
// *core.ConfigError listing every problem.
func New(cfg Config) (*Handler, error) {
	var problems []error
	if cfg.Engine == nil {
		problems = append(problems, errors.New("inspect: no engine"))
	}
	if cfg.Authorize == nil {
		problems = append(problems, errors.New("inspect: no Authorize check; the page shows keys and budget state, so it needs one (inspect.Loopback for a local demo)"))
	}
	if cfg.LookupTimeout < 0 {
		problems = append(problems, errors.New("inspect: lookup timeout is negative"))
	}
	if len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	if cfg.Title == "" {
		cfg.Title = "quotagate"
	}
	if cfg.LookupTimeout == 0 {
		cfg.LookupTimeout = 2 * time.Second
	}
	return &Handler{cfg: cfg}, nil
}

// MustNew is New for a configuration known to be valid; it panics on error.
func MustNew(cfg Config) *Handler {
	h, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return h
}

// Loopback is an Authorize check for a page served on a loopback
// listener. It admits a request when
//
//   - its connection comes from a loopback address (127.0.0.0/8, ::1),
//   - it carries no forwarding header (Forwarded, X-Forwarded-For,
//     X-Real-Ip), so that a reverse proxy on the same host that adds one
//     does not make every client look local, and
//   - its Host is a loopback name or address ("localhost", a name under
//     .localhost, 127.0.0.0/8, ::1), so that a page whose name was
//     rebound to 127.0.0.1 (DNS rebinding) cannot read it through a local
//     browser.
//
// What it cannot tell: a proxy or tunnel on the same host that forwards
// outside requests to the page's listener without adding a forwarding
// header (httputil.ReverseProxy with Rewrite and SetURL, nginx's
// proxy_pass without proxy_set_header, any TCP proxy, an SSH tunnel) makes
// every client look local, Host included when the proxy rewrites it.
// Serve the page on a listener of its own, bound to a loopback address
// and reached by no proxy, as pprof is usually served (examples/quickstart
// does); or authorize with something a client must prove, such as an
// operator's session.
func Loopback(r *http.Request) bool {
	if r.Header.Get("Forwarded") != "" || r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("X-Real-Ip") != "" {
		return false
	}
	return loopbackHost(r.RemoteAddr) && loopbackName(r.Host)
}

// loopbackHost reports whether addr (host:port or a bare host) is a
// loopback IP address.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// loopbackName reports whether a Host field names this host: a loopback
// address, "localhost" or a name under ".localhost" (RFC 6761), with or
// without a port.
func loopbackName(host string) bool {
	if loopbackHost(host) {
		return true
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// report is the page's data; its JSON is the page's JSON form.
type report struct {
	Title       string         `json:"title"`
	Time        time.Time      `json:"time"`
	BreakerOpen bool           `json:"breaker_open"`
	Budgets     []budgetReport `json:"budgets"`
	Layers      []layerReport  `json:"layers"`
	Lookup      *lookup        `json:"lookup,omitempty"`
	Denials     []Event        `json:"recent_denials"`
	Errors      []Event        `json:"recent_store_errors"`
	Recording   bool           `json:"recording"`
}

type budgetReport struct {
	Name          string   `json:"name"`
	Algorithm     string   `json:"algorithm"`
	Quota         int64    `json:"quota"`
	Window        string   `json:"window"`
	WindowSeconds float64  `json:"window_seconds"`
	Burst         int64    `json:"burst,omitempty"`
	MaxWait       string   `json:"max_wait,omitempty"`
	KeyClass      string   `json:"key_class"`
	FailMode      string   `json:"fail_mode"`
	Shadow        bool     `json:"shadow"`
	PerKeyQuota   bool     `json:"per_key_quota"`
	IgnoreMethods []string `json:"ignore_methods,omitempty"`
	Layers        []int    `json:"layers"`
	Routes        []string `json:"routes"`
	// Scale is, for a budget with a Scale (core/scale), the factor its
	// quota is multiplied by now, and ScaledQuota the quota at that
	// factor (of the static quota, for a budget whose quota is resolved
	// per key).
	Scale       *float64 `json:"scale,omitempty"`
	ScaledQuota int64    `json:"scaled_quota,omitempty"`
}

type layerReport struct {
	Index      int          `json:"index"`
	Budgets    []layerSpend `json:"budgets"`
	Skips      bool         `json:"skips"`
	CountsWhen bool         `json:"counts_when"`
}

type layerSpend struct {
	Budget string `json:"budget"`
	// Cost is the static cost, or -1 when computed per request.
	Cost int64 `json:"cost"`
}

type lookup struct {
	Key     string      `json:"key"`
	Error   string      `json:"error,omitempty"`
	Budgets []keyReport `json:"budgets,omitempty"`
}

type keyReport struct {
	Budget       string  `json:"budget"`
	Quota        int64   `json:"quota"`
	Burst        int64   `json:"burst,omitempty"`
	Remaining    int64   `json:"remaining"`
	Reset        string  `json:"reset"`
	ResetSeconds float64 `json:"reset_seconds"`
	// InFlight is, for a concurrency budget, the slots held: quota minus
	// remaining.
	InFlight   *int64 `json:"in_flight,omitempty"`
	QuotaError string `json:"quota_error,omitempty"`
}

// ServeHTTP implements http.Handler. It answers GET and HEAD; the query's
// key parameter looks a key up, format=json selects JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !h.cfg.Authorize(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rep := h.report(r)
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	_ = page.Execute(w, rep)
}

func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func (h *Handler) report(r *http.Request) *report {
	eng := h.cfg.Engine
	rep := &report{
		Title:       h.cfg.Title,
		Time:        time.Now().UTC(),
		BreakerOpen: eng.BreakerOpen(),
		Denials:     h.cfg.Recent.Denials(),
		Errors:      h.cfg.Recent.Errors(),
		Recording:   h.cfg.Recent != nil,
	}
	routes := h.cfg.Recent.Routes()
	layers := eng.Layers()
	spentBy := map[string][]int{}
	for i, l := range layers {
		lr := layerReport{Index: i, Skips: l.Skips, CountsWhen: l.CountsWhen}
		for j, b := range l.Budgets {
			lr.Budgets = append(lr.Budgets, layerSpend{Budget: b, Cost: l.Costs[j]})
			spentBy[b] = append(spentBy[b], i)
		}
		rep.Layers = append(rep.Layers, lr)
	}
	for _, b := range eng.Budgets() {
		br := budgetReport{
			Name: b.Name, Algorithm: b.Algorithm.String(), Quota: b.Quota,
			Window: b.Window.String(), WindowSeconds: b.Window.Seconds(), Burst: b.Burst,
			KeyClass: b.KeyClass, FailMode: "fail_" + b.FailureMode.String(), Shadow: b.Shadow,
			PerKeyQuota: b.QuotaFunc != nil, IgnoreMethods: b.IgnoreMethods,
			Layers: spentBy[b.Name], Routes: routes[b.Name],
		}
		if br.Routes == nil {
			br.Routes = []string{}
		}
		if br.Layers == nil {
			br.Layers = []int{}
		}
		if b.MaxWait > 0 {
			br.MaxWait = b.MaxWait.String()
		}
		if b.Scale != nil {
			f, q := scaled(b.Quota, b.Scale.Scale())
			br.Scale, br.ScaledQuota = &f, q
		}
		rep.Budgets = append(rep.Budgets, br)
	}
	if key, ok := r.URL.Query()["key"]; ok && len(key) > 0 && key[0] != "" {
		rep.Lookup = h.lookup(r.Context(), key[0])
	}
	return rep
}

// scaled returns the factor a budget's quota is multiplied by when its
// Scaler reports f, and quota at that factor, as core applies it
// (core.Scaler): floor(quota × f), at least 1; a factor of 1 or more, or
// not a number, is 1.
func scaled(quota int64, f float64) (float64, int64) {
	switch {
	case !(f < 1):
		return 1, quota
	case !(f > 0):
		return f, 1
	}
	return f, max(1, int64(float64(quota)*f))
}

func (h *Handler) lookup(ctx context.Context, key string) *lookup {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.LookupTimeout)
	defer cancel()
	lk := &lookup{Key: key}
	res, err := h.cfg.Engine.Peek(ctx, key)
	if err != nil {
		lk.Error = err.Error()
		return lk
	}
	for _, p := range res {
		kr := keyReport{
			Budget: p.Budget, Quota: p.Limit.Quota, Remaining: p.Remaining,
			Reset: p.Reset.Round(time.Millisecond).String(), ResetSeconds: p.Reset.Seconds(),
		}
		switch p.Limit.Algorithm {
		case core.TokenBucket, core.LeakyBucket:
			kr.Burst = p.Limit.Burst
		case core.Concurrency:
			n := max(0, p.Limit.Quota-p.Remaining)
			kr.InFlight = &n
		}
		if p.QuotaErr != nil {
			kr.QuotaError = p.QuotaErr.Error()
		}
		lk.Budgets = append(lk.Budgets, kr)
	}
	return lk
}

//go:embed page.html
var pageFS embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"cost": func(c int64) string {
		if c < 0 {
			return "computed"
		}
		return strconv.FormatInt(c, 10)
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"percent": func(f *float64) string {
		return strconv.FormatFloat(math.Round(*f*1000)/10, 'f', -1, 64) + "%"
	},
}).ParseFS(pageFS, "page.html"))
