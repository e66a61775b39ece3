package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// The committed picture is what the program draws now: run
// `go run ./examples/pictures` after changing an algorithm or the picture.
func TestAlgorithmsPictureIsCurrent(t *testing.T) {
	got, err := algorithmsSVG()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("algorithms.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("algorithms.svg is stale: run go run ./examples/pictures from the repository's root")
	}
	wellFormed(t, got)
}

// What the picture shows is what the algorithms do.
func TestAlgorithmsShowTheirShapes(t *testing.T) {
	runs, err := algorithms()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]algorithmRun{}
	for _, r := range runs {
		by[r.Name] = r
		if len(r.Sent) != 90 {
			t.Errorf("%s: %d sent, want 90 (every 25 ms from 0.75 s to 3 s)", r.Name, len(r.Sent))
		}
	}
	// The fixed window's boundary burst: 2×quota within half a second.
	if n := by["fixed window"].MaxIn(500 * time.Millisecond); n != 20 {
		t.Errorf("fixed window: %d admitted within 500 ms, want 20", n)
	}
	if n := by["sliding log"].MaxIn(time.Second); n != 10 {
		t.Errorf("sliding log: %d admitted within 1 s, want exactly 10", n)
	}
	// GCRA: burst + floor(L/T) in any interval L.
	if n := by["token bucket (burst 10)"].MaxIn(time.Second); n > 20 || n < 11 {
		t.Errorf("token bucket: %d admitted within 1 s, want 11..20", n)
	}
	if n := by["sliding window counter"].MaxIn(time.Second); n <= 10 || n >= 20 {
		t.Errorf("sliding window counter: %d within 1 s, want between the log's 10 and the fixed window's 20", n)
	}
	shaped := by["leaky bucket (shaping)"].Admitted
	for i := 1; i < len(shaped); i++ {
		if gap := shaped[i] - shaped[i-1]; gap < 100*time.Millisecond {
			t.Fatalf("leaky bucket: admissions %v and %v are %v apart, want at least 100 ms", shaped[i-1], shaped[i], gap)
		}
	}
}

// The client picture's experiment on a small job: the transport does the
// work with (almost) no 429, the naive client with many.
func TestClientExperiment(t *testing.T) {
	job := clientJob{Requests: 12, Workers: 3, Quota: 5}
	runs, err := clientRuns(job)
	if err != nil {
		t.Fatal(err)
	}
	naive, paced := runs[0], runs[1]
	for _, r := range runs {
		if r.Failed != 0 || r.Count(http.StatusOK) != job.Requests {
			t.Errorf("%s: %d done, %d given up; want all %d done", r.Name, r.Count(http.StatusOK), r.Failed, job.Requests)
		}
	}
	n429, p429 := naive.Count(http.StatusTooManyRequests), paced.Count(http.StatusTooManyRequests)
	t.Logf("naive: %d attempts, %d 429s, %v; transport: %d attempts, %d 429s, %v",
		len(naive.Attempts), n429, naive.Done, len(paced.Attempts), p429, paced.Done)
	if n429 < 5 || p429 >= n429/2 {
		t.Errorf("429s: naive %d, transport %d; want the transport to get far fewer", n429, p429)
	}
	svg := clientSVG(job, runs)
	wellFormed(t, svg)
	if !bytes.Contains(svg, []byte("pacer.Transport")) {
		t.Error("the client picture does not name the transport")
	}
	committed, err := os.ReadFile("client.svg")
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, committed)
}

func wellFormed(t *testing.T, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}
