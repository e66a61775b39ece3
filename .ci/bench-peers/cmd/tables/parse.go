package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Result is one line of `go test -bench` output.
type Result struct {
	// Name is the benchmark's name without "Benchmark" and without the
	// GOMAXPROCS suffix: "InMem/row=one-key-serial/c=quotagate".
	Name string
	// Iterations is b.N.
	Iterations int64
	// Metrics maps a unit ("ns/op", "allocs/op", "decisions/s") to its value.
	Metrics map[string]float64
}

// Group is the benchmark function's name ("InMem").
func (r Result) Group() string {
	g, _, _ := strings.Cut(r.Name, "/")
	return g
}

// Param returns the value of a key=value element of the name ("c" in
// ".../c=quotagate"), or "".
func (r Result) Param(key string) string {
	for _, el := range strings.Split(r.Name, "/")[1:] {
		if k, v, ok := strings.Cut(el, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// ParseBench reads `go test -bench` output and returns its result lines in
// order; every other line (headers, PASS, logs, failures) is skipped.
func ParseBench(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue // "BenchmarkX-2 --- FAIL: ..." and the like
		}
		res := Result{Name: trimProcs(strings.TrimPrefix(f[0], "Benchmark")), Iterations: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s: %v", line, f[i], f[i+1], err)
			}
			res.Metrics[f[i+1]] = v
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// trimProcs drops the "-N" GOMAXPROCS suffix go test adds to a name.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

// Trial is one ACCURACY line of TestAccuracy.
type Trial struct {
	Contender string
	Trial     int
	Admitted  int
	Requests  int
	Errors    int
}

// ParseAccuracy reads TestAccuracy's output:
//
//	ACCURACY c=<contender> trial=<n> admitted=<n> requests=<n> errors=<n>
func ParseAccuracy(r io.Reader) ([]Trial, error) {
	var out []Trial
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "ACCURACY" {
			continue
		}
		var t Trial
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if k == "c" {
				t.Contender = v
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", sc.Text(), err)
			}
			switch k {
			case "trial":
				t.Trial = n
			case "admitted":
				t.Admitted = n
			case "requests":
				t.Requests = n
			case "errors":
				t.Errors = n
			}
		}
		if t.Contender == "" {
			return nil, fmt.Errorf("%q: no contender", sc.Text())
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// Series gathers the results of each benchmark over the passes, in the
// order of the output: the i-th value of a name is its i-th pass.
type Series struct {
	names []string            // first appearance order
	runs  map[string][]Result // name -> passes
}

func NewSeries(results []Result) *Series {
	s := &Series{runs: map[string][]Result{}}
	for _, r := range results {
		if _, ok := s.runs[r.Name]; !ok {
			s.names = append(s.names, r.Name)
		}
		s.runs[r.Name] = append(s.runs[r.Name], r)
	}
	return s
}

// Values returns one metric of a benchmark, per pass.
func (s *Series) Values(name, unit string) []float64 {
	var v []float64
	for _, r := range s.runs[name] {
		if x, ok := r.Metrics[unit]; ok {
			v = append(v, x)
		}
	}
	return v
}

// Names returns the benchmark names in order of first appearance.
func (s *Series) Names() []string { return s.names }
