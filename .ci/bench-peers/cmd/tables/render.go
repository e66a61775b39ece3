package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Display names of the contenders, by the name the benchmarks give them.
var contenderNames = map[string]string{
	"quotagate":          "quotagate",
	"quotagate-nofields": "quotagate, no fields",
	"sethvargo":          "sethvargo/go-limiter",
	"xrate":              "x/time/rate",
	"uber":               "uber-go/ratelimit",
	"throttled":          "throttled",
	"ulule":              "ulule/limiter",
	"httprate":           "go-chi/httprate",
	"tollbooth":          "tollbooth",
	"echo":               "Echo's RateLimiter",
	"fiber":              "Fiber's limiter",
	"redis_rate":         "go-redis/redis_rate",
	"floor":              "floor (EVALSHA)",
	"_bare":              "bare router",
}

var routerNames = map[string]string{
	"nethttp": "net/http", "echov4": "Echo v4", "echov5": "Echo v5",
	"fiberv2": "Fiber v2", "fiberv3": "Fiber v3", "gin": "Gin",
}

var rowNames = map[string]string{
	"row=one-key-serial":     "one key, serial",
	"row=one-key-parallel":   "one key, parallel",
	"row=100k-keys-parallel": "100,000 keys, parallel",
}

func display(m map[string]string, k string) string {
	if d, ok := m[k]; ok {
		return d
	}
	return k
}

func isQuotagate(c string) bool { return strings.HasPrefix(c, "quotagate") }

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// pairwise applies f to the values of the same pass.
func pairwise(a, b []float64, f func(x, y float64) float64) []float64 {
	out := make([]float64, 0, min(len(a), len(b)))
	for i := range min(len(a), len(b)) {
		out = append(out, f(a[i], b[i]))
	}
	return out
}

func sub(x, y float64) float64 { return x - y }
func div(x, y float64) float64 { return x / y }

// num formats a figure with three significant digits at most, and
// thousands separators above 1000.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v):
		return "—"
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(a)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if v < 0 {
		s = "-" + s
	}
	return s
}

// kilo formats a rate in thousands: 41.2k.
func kilo(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return num(v/1000) + "k"
}

func spread(v []float64, f func(float64) string) string {
	if len(v) < 2 {
		return ""
	}
	return " (" + f(slices.Min(v)) + "–" + f(slices.Max(v)) + ")"
}

// allocs formats allocations per operation: whole when they are.
func allocs(a float64) string {
	unit := " allocs"
	if a == 1 {
		unit = " alloc"
	}
	if a == math.Round(a) {
		return strconv.FormatFloat(a, 'f', 0, 64) + unit
	}
	return strconv.FormatFloat(a, 'f', 1, 64) + unit
}

func ratio(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	return strconv.FormatFloat(median(v), 'f', 2, 64) + "×"
}

// grid returns, for the results of one benchmark function whose row key
// passes keep, the row keys and the contenders, in order of first
// appearance. A name is Group/<row key>/c=<contender>.
func grid(s *Series, group string, keep func(row string) bool) (rows, cs []string) {
	for _, n := range s.Names() {
		rest, ok := strings.CutPrefix(n, group+"/")
		if !ok {
			continue
		}
		i := strings.LastIndex(rest, "/c=")
		if i < 0 {
			continue
		}
		row, c := rest[:i], rest[i+3:]
		if keep != nil && !keep(row) {
			continue
		}
		if !slices.Contains(rows, row) {
			rows = append(rows, row)
		}
		if !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	return rows, cs
}

func name(group, row, c string) string { return group + "/" + row + "/c=" + c }

// bestPeer is the peer (not quotagate, not excluded) whose figure's median
// is lowest (lower) or highest (!lower), or "".
func bestPeer(cs []string, fig func(c string) []float64, lower bool, exclude ...string) string {
	best, bv := "", math.NaN()
	for _, c := range cs {
		if isQuotagate(c) || slices.Contains(exclude, c) {
			continue
		}
		v := fig(c)
		if len(v) == 0 {
			continue
		}
		m := median(v)
		if best == "" || (lower && m < bv) || (!lower && m > bv) {
			best, bv = c, m
		}
	}
	return best
}

type tableWriter struct{ b strings.Builder }

func (t *tableWriter) line(cells ...string) {
	t.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

func (t *tableWriter) header(cells ...string) {
	t.line(cells...)
	al := make([]string, len(cells))
	for i := range al {
		al[i] = "---:"
	}
	al[0] = "---"
	t.line(al...)
}

// InMem renders the in-memory table: ns per decision.
func InMem(s *Series) string {
	const g = "InMem"
	rows, cs := grid(s, g, nil)
	if len(rows) == 0 {
		return ""
	}
	var t tableWriter
	t.b.WriteString("### In memory: ns per decision, every call allowed\n\n")
	t.b.WriteString("Each cell: median ns per decision (range over passes), allocations when not 0, and the share of calls " +
		"a limiter refused by error when not 0 (throttled's compare-and-swap gives up on a contended key). " +
		"Ratio: quotagate ÷ the best peer of the row, per pass, median (below 1: quotagate is faster).\n\n")
	hdr := []string{"row"}
	for _, c := range cs {
		hdr = append(hdr, display(contenderNames, c))
	}
	t.header(append(hdr, "quotagate ÷ best peer")...)
	for _, row := range rows {
		ns := func(c string) []float64 { return s.Values(name(g, row, c), "ns/op") }
		cells := []string{display(rowNames, row)}
		for _, c := range cs {
			v := ns(c)
			if len(v) == 0 {
				cells = append(cells, "—")
				continue
			}
			cell := num(median(v)) + spread(v, num)
			if a := median(s.Values(name(g, row, c), "allocs/op")); a > 0 {
				cell += ", " + allocs(a)
			}
			if r := median(s.Values(name(g, row, c), "refused/op")); r > 0 {
				cell += ", " + strconv.FormatFloat(100*r, 'g', 2, 64) + "% refused"
			}
			cells = append(cells, cell)
		}
		best := bestPeer(cs, ns, true)
		r := "—"
		if best != "" {
			r = ratio(pairwise(ns("quotagate"), ns(best), div)) + " (" + display(contenderNames, best) + ")"
		}
		t.line(append(cells, r)...)
	}
	return t.b.String()
}

// Middleware renders one table per router: ns and allocations per request
// over the bare router.
func Middleware(s *Series) string {
	const g = "Middleware"
	var routers []string
	for _, n := range s.Names() {
		if rest, ok := strings.CutPrefix(n, g+"/router="); ok {
			r, _, _ := strings.Cut(rest, "/")
			if !slices.Contains(routers, r) {
				routers = append(routers, r)
			}
		}
	}
	var b strings.Builder
	for _, router := range routers {
		rows, cs := grid(s, g, func(row string) bool { return strings.HasPrefix(row, "router="+router+"/") })
		cs = slices.DeleteFunc(cs, func(c string) bool { return c == "_bare" })
		var t tableWriter
		fmt.Fprintf(&t.b, "#### %s\n\n", display(routerNames, router))
		hdr := []string{"mode", "bare router"}
		for _, c := range cs {
			hdr = append(hdr, display(contenderNames, c))
		}
		var qgs []string
		for _, c := range cs {
			if isQuotagate(c) {
				qgs = append(qgs, c)
				hdr = append(hdr, display(contenderNames, c)+" ÷ best peer")
			}
		}
		t.header(hdr...)
		for _, row := range rows {
			bare := s.Values(name(g, row, "_bare"), "ns/op")
			bareAllocs := median(s.Values(name(g, row, "_bare"), "allocs/op"))
			over := func(c string) []float64 { return pairwise(s.Values(name(g, row, c), "ns/op"), bare, sub) }
			_, mode, _ := strings.Cut(row, "/mode=")
			cells := []string{mode, num(median(bare)) + spread(bare, num)}
			for _, c := range cs {
				v := over(c)
				if len(v) == 0 {
					cells = append(cells, "—")
					continue
				}
				a := median(s.Values(name(g, row, c), "allocs/op")) - bareAllocs
				cells = append(cells, num(median(v))+spread(v, num)+", "+allocs(a))
			}
			best := bestPeer(cs, over, true)
			for _, q := range qgs {
				if best == "" {
					cells = append(cells, "— (no peer)")
					continue
				}
				cells = append(cells, ratio(pairwise(over(q), over(best), div))+" ("+display(contenderNames, best)+")")
			}
			t.line(cells...)
		}
		b.WriteString(t.b.String())
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return ""
	}
	return "### Middleware: ns per request over the bare router\n\n" +
		"In-process requests (no network), every request allowed. Each cell: median ns per request over the bare router, per pass (range over passes), and the " +
		"allocations added. Ratio: quotagate's overhead ÷ the best peer's, per pass, median (below 1: quotagate " +
		"adds less). The bare router column is the router alone, subtracted from the others.\n\n" + b.String()
}

// Redis renders the Redis tables: decisions per second on loopback, each
// as a share of the floor of the same pass; the decisions' latency; and
// the same two for each delay of BenchmarkRedisDelayed and for the cluster
// of BenchmarkRedisCluster.
func Redis(s *Series) string {
	var b strings.Builder
	b.WriteString(redisRates(s, "Redis", nil, "### Redis: decisions per second for one budget\n\n"))
	b.WriteString(redisLatency(s, "Redis", nil, "### Redis: decision latency\n\n"))
	var delays []string
	rows, _ := grid(s, "RedisDelayed", nil)
	for _, row := range rows {
		d, _, _ := strings.Cut(row, "/")
		if !slices.Contains(delays, d) {
			delays = append(delays, d)
		}
	}
	for _, d := range delays {
		keep := func(row string) bool { return strings.HasPrefix(row, d+"/") }
		us := strings.TrimSuffix(strings.TrimPrefix(d, "delay="), "us")
		b.WriteString("\n" + redisRates(s, "RedisDelayed", keep, "### Redis through a proxy holding each direction "+us+" µs: decisions per second\n\n"))
		b.WriteString(redisLatency(s, "RedisDelayed", keep, "### Redis through a proxy holding each direction "+us+" µs: decision latency\n\n"))
	}
	if rates := redisRates(s, "RedisCluster", nil, "### Redis Cluster of three masters: decisions per second\n\n"); rates != "" {
		b.WriteString("\n" + rates)
		b.WriteString(redisLatency(s, "RedisCluster", nil, "### Redis Cluster of three masters: decision latency\n\n"))
	}
	return b.String()
}

// redisRates renders decisions per second for the rows of group that pass
// keep.
func redisRates(s *Series, g string, keep func(string) bool, title string) string {
	rows, cs := grid(s, g, keep)
	if len(rows) == 0 {
		return ""
	}
	var t tableWriter
	t.b.WriteString(title)
	t.b.WriteString("Each cell: median decisions per second in thousands (range over passes), and the share of the " +
		"floor (one EVALSHA of a minimal INCRBY + PEXPIRE script) in the same pass, median; errors when not 0. " +
		"Ratio: the best peer's throughput ÷ quotagate's, per pass, median (below 1: quotagate serves more).\n\n")
	hdr := []string{"keys × goroutines"}
	for _, c := range cs {
		hdr = append(hdr, display(contenderNames, c))
	}
	t.header(append(hdr, "best peer ÷ quotagate")...)
	for _, row := range rows {
		rate := func(c string) []float64 { return s.Values(name(g, row, c), "decisions/s") }
		floor := rate("floor")
		cells := []string{redisRow(row)}
		for _, c := range cs {
			v := rate(c)
			if len(v) == 0 {
				cells = append(cells, "—")
				continue
			}
			cell := kilo(median(v)) + spread(v, kilo)
			if c != "floor" && len(floor) > 0 {
				cell += ", " + strconv.Itoa(int(math.Round(100*median(pairwise(v, floor, div))))) + "%"
			}
			if e := median(s.Values(name(g, row, c), "errors/op")); e > 0 {
				cell += ", " + strconv.FormatFloat(100*e, 'g', 2, 64) + "% errors"
			}
			cells = append(cells, cell)
		}
		best := bestPeer(cs, rate, false, "floor")
		r := "—"
		if best != "" {
			r = ratio(pairwise(rate(best), rate("quotagate"), div)) + " (" + display(contenderNames, best) + ")"
		}
		t.line(append(cells, r)...)
	}
	return t.b.String()
}

// redisLatency renders the median and 99th percentile of a decision's
// latency for the rows of group that pass keep, when they report them.
func redisLatency(s *Series, g string, keep func(string) bool, title string) string {
	rows, cs := grid(s, g, keep)
	var t tableWriter
	for _, row := range rows {
		cells := []string{redisRow(row)}
		some := false
		for _, c := range cs {
			p50, p99 := s.Values(name(g, row, c), "p50-µs"), s.Values(name(g, row, c), "p99-µs")
			if len(p50) == 0 || len(p99) == 0 {
				cells = append(cells, "—")
				continue
			}
			some = true
			cells = append(cells, micros(median(p50))+" / "+micros(median(p99)))
		}
		if some {
			t.line(cells...)
		}
	}
	if t.b.Len() == 0 {
		return ""
	}
	hdr := []string{"keys × goroutines"}
	for _, c := range cs {
		hdr = append(hdr, display(contenderNames, c))
	}
	var h tableWriter
	h.b.WriteString("\n" + title)
	h.b.WriteString("Each cell: the median and the 99th percentile of one decision's latency, each the median over passes.\n\n")
	h.header(hdr...)
	return h.b.String() + t.b.String()
}

// micros formats a latency given in microseconds: 41 µs, 1.2 ms.
func micros(us float64) string {
	if us >= 1000 {
		return strconv.FormatFloat(us/1000, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(us, 'f', 0, 64) + " µs"
}

func redisRow(row string) string {
	var keys, g string
	for _, el := range strings.Split(row, "/") {
		k, v, _ := strings.Cut(el, "=")
		n, err := strconv.Atoi(v)
		if err == nil && n >= 1000 {
			v = num(float64(n))
		}
		switch k {
		case "keys":
			keys = v + " keys"
			if v == "1" {
				keys = "1 key"
			}
		case "g":
			g = v + " goroutines"
			if v == "1" {
				g = "1 goroutine"
			}
		}
	}
	return keys + ", " + g
}

// Accuracy renders the accuracy table: what each Redis contender admitted.
func Accuracy(trials []Trial) string {
	if len(trials) == 0 {
		return ""
	}
	var order []string
	by := map[string][]Trial{}
	for _, tr := range trials {
		if _, ok := by[tr.Contender]; !ok {
			order = append(order, tr.Contender)
		}
		by[tr.Contender] = append(by[tr.Contender], tr)
	}
	var t tableWriter
	t.b.WriteString("### Redis accuracy: 1000 per minute, 1500 requests from 8 goroutines in one window\n\n")
	t.header("contender", "admitted per trial", "min / median / max", "errors")
	for _, c := range order {
		var adm []string
		var v []float64
		errs := 0
		for _, tr := range by[c] {
			adm = append(adm, strconv.Itoa(tr.Admitted))
			v = append(v, float64(tr.Admitted))
			errs += tr.Errors
		}
		t.line(display(contenderNames, c), strings.Join(adm, ", "),
			fmt.Sprintf("%.0f / %.0f / %.0f", slices.Min(v), median(v), slices.Max(v)), strconv.Itoa(errs))
	}
	t.b.WriteString("\nA fixed window admits exactly 1000; a GCRA limiter (go-redis/redis_rate) may add what refilled " +
		"while the trial ran (1000 per minute).\n")
	return t.b.String()
}
