// Command tables turns the peer harness's `go test -bench` output into the
// markdown tables of docs/performance.md: one table per comparison, each
// figure the median of the passes with its range, and its same-pass ratio to
// the best peer of its row.
//
//	go run ./cmd/tables -method "..." [-doc ../../docs/performance.md] bench.txt... [-accuracy accuracy.txt]
//
// It prints the tables and, with -doc, writes them into that file between
// the lines <!-- tables:begin --> and <!-- tables:end -->.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const (
	beginMarker = "<!-- tables:begin -->"
	endMarker   = "<!-- tables:end -->"
)

func main() {
	method := flag.String("method", "", "the method line printed above the tables")
	doc := flag.String("doc", "", "a markdown file whose tables, between the markers, are replaced")
	accuracy := flag.String("accuracy", "", "TestAccuracy's output")
	flag.Parse()
	if err := run(os.Stdout, *method, *doc, *accuracy, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "tables:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, method, doc, accuracy string, benchFiles []string) error {
	var results []Result
	for _, f := range benchFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		r, err := ParseBench(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		results = append(results, r...)
	}
	var trials []Trial
	if accuracy != "" {
		data, err := os.ReadFile(accuracy)
		if err != nil {
			return err
		}
		if trials, err = ParseAccuracy(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("%s: %v", accuracy, err)
		}
	}
	if len(results) == 0 && len(trials) == 0 {
		return fmt.Errorf("no benchmark results in %v", benchFiles)
	}
	tables := Render(NewSeries(results), trials, method)
	if _, err := io.WriteString(w, tables); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	updated, err := Splice(string(old), tables)
	if err != nil {
		return fmt.Errorf("%s: %v", doc, err)
	}
	return os.WriteFile(doc, []byte(updated), 0o644)
}

// Render returns every table, the method line first.
func Render(s *Series, trials []Trial, method string) string {
	var parts []string
	if method != "" {
		parts = append(parts, "Method: "+method+"\n")
	}
	for _, p := range []string{InMem(s), Middleware(s), Redis(s), Accuracy(trials)} {
		if p != "" {
			parts = append(parts, strings.TrimRight(p, "\n")+"\n")
		}
	}
	return strings.Join(parts, "\n")
}

// Splice replaces what lies between the begin and end markers of doc with
// tables.
func Splice(doc, tables string) (string, error) {
	i := strings.Index(doc, beginMarker)
	j := strings.Index(doc, endMarker)
	if i < 0 || j < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s lines", beginMarker, endMarker)
	}
	return doc[:i+len(beginMarker)] + "\n\n" + strings.TrimRight(tables, "\n") + "\n\n" + doc[j:], nil
}
