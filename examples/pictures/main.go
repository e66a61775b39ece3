// Command pictures draws the README's pictures, so that they stay true to
// the code:
//
//   - algorithms.svg: requests admitted over time for the same traffic
//     under each algorithm, computed with the real memory store and a fake
//     clock (so the picture is the same on every run);
//   - client.svg: a client using pacer.Transport against a limited
//     server, next to a naive client that retries every 50 ms, measured on
//     loopback in real time (a few seconds).
//
// From the repository's root:
//
//	go run ./examples/pictures
//	go run ./examples/pictures -out /tmp/pics
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", filepath.Join("examples", "pictures"), "directory to write the SVG files to")
	flag.Parse()
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	alg, err := algorithmsSVG()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "algorithms.svg"), alg, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", filepath.Join(dir, "algorithms.svg"))
	job := clientJob{Requests: 40, Workers: 4, Quota: 10}
	runs, err := clientRuns(job)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "client.svg"), clientSVG(job, runs), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", filepath.Join(dir, "client.svg"))
	return nil
}
