// Command benchcheck reads `go test -bench` output of the paired
// benchmarks run several times (make bench-check runs them three times)
// and fails when a figure's median is past its goal by more than the
// runs' noise: half the spread of the figure over the runs. The goals are
// issue 35's; docs/benchmarks.md records the figures.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// goal is an upper bound on one reported figure of one benchmark.
type goal struct {
	bench, unit string
	max         float64
	what        string
}

// goals are the paired figures the hot paths are held to.
var goals = []goal{
	{"BenchmarkDoSuccess/failsafe-paired", "ratio", 0.20, "plain Do over failsafe-go's success path"},
	{"BenchmarkDoSuccess/metrics-paired", "delta-ns/op", 25, "Do with metrics minus plain Do, ns"},
	{"BenchmarkBudget/success-path-paired", "ratio", 0.50, "Primary and Success over rate.Allow"},
	{"BenchmarkBudget/try-retry-paired", "ratio", 1.00, "TryRetry and Success over rate.Allow"},
	{"BenchmarkUnaryPaired", "cpu-ratio", 1.10, "the gRPC interceptor's unary call over a bare one, CPU (runtime/grpc)"},
}

// procs is the -cpu suffix go test adds to a name when GOMAXPROCS is not 1.
var procs = regexp.MustCompile(`-\d+$`)

// parse returns every figure of every benchmark line: name, then unit, then
// one value a run.
func parse(r io.Reader) (map[string]map[string][]float64, error) {
	figures := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procs.ReplaceAllString(f[0], "")
		if figures[name] == nil {
			figures[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 { // f[1] is the iteration count
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a figure: %w", name, f[i], err)
			}
			figures[name][f[i+1]] = append(figures[name][f[i+1]], v)
		}
	}
	return figures, sc.Err()
}

// verdict judges one goal's figures: their median, the noise, and whether
// the median is past the goal by more than the noise.
func verdict(g goal, runs []float64) (median, noise float64, ok bool) {
	s := slices.Sorted(slices.Values(runs))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	noise = (s[len(s)-1] - s[0]) / 2
	return median, noise, median <= g.max+noise
}

// check writes one line a goal to w and returns how many failed.
func check(figures map[string]map[string][]float64, w io.Writer) int {
	failed := 0
	for _, g := range goals {
		runs := figures[g.bench][g.unit]
		if len(runs) == 0 {
			fmt.Fprintf(w, "FAIL %s %s: no figure (goal <= %g, %s)\n", g.bench, g.unit, g.max, g.what)
			failed++
			continue
		}
		median, noise, ok := verdict(g, runs)
		state := "ok  "
		if !ok {
			state = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s %s: median %.3g ± %.2g over %d runs, goal <= %g (%s)\n", state, g.bench, g.unit, median, noise, len(runs), g.max, g.what)
	}
	return failed
}

func main() {
	figures, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcheck:", err)
		os.Exit(2)
	}
	if n := check(figures, os.Stdout); n > 0 {
		fmt.Printf("benchcheck: %d of %d goals missed\n", n, len(goals))
		os.Exit(1)
	}
}
