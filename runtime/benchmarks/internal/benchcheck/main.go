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

// goal is a bound on one reported figure of one benchmark: an upper one,
// or a lower one when atLeast is set.
type goal struct {
	bench, unit string
	bound       float64
	what        string
	atLeast     bool
}

// goals are the paired figures the hot paths are held to.
var goals = []goal{
	{"BenchmarkDoSuccess/failsafe-paired", "ratio", 0.20, "plain Do over failsafe-go's success path", false},
	{"BenchmarkDoSuccess/metrics-paired", "delta-ns/op", 25, "Do with metrics minus plain Do, ns", false},
	{"BenchmarkBudget/success-path-paired", "ratio", 0.50, "Primary and Success over rate.Allow", false},
	{"BenchmarkBudget/try-retry-paired", "ratio", 1.00, "TryRetry and Success over rate.Allow", false},
	{"BenchmarkUnaryPaired", "cpu-ratio", 1.10, "the gRPC interceptor's unary call over a bare one, CPU (runtime/grpc)", false},
	{"BenchmarkProxyPaired", "governed/bare-added-p99", 0.50, "the sidecar's added p99 over httputil.ReverseProxy's (proxy)", false},
	{"BenchmarkProxyPaired", "governed/bare-req/s", 1.00, "the sidecar's throughput over httputil.ReverseProxy's (proxy)", true},
}

// floors are figures reported beside the goals, not judged: what a goal's
// figure cannot go below on the machine that ran it.
var floors = []goal{
	{"BenchmarkDoSuccess/clock-read-paired", "delta-ns/op", 0, "one monotonic clock reading after plain Do, ns: the floor of metrics-paired", false},
	{"BenchmarkUnaryPaired", "byhand-cpu-ratio", 0, "the bare call carrying the deadline and the key by hand, CPU", false},
	{"BenchmarkUnaryPaired", "handled-cpu-ratio", 0, "that call on a channel with a stats handler that does nothing, CPU: the floor of cpu-ratio", false},
	{"BenchmarkProxyPaired", "tuned/bare-added-p99", 0,
		"a ReverseProxy given the sidecar's two tunings (an idle connection a caller, pooled buffers), beside governed/bare-added-p99", false},
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
// the median is past the goal (above its bound, or below it when atLeast)
// by more than the noise.
func verdict(g goal, runs []float64) (median, noise float64, ok bool) {
	s := slices.Sorted(slices.Values(runs))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	noise = (s[len(s)-1] - s[0]) / 2
	if g.atLeast {
		return median, noise, median >= g.bound-noise
	}
	return median, noise, median <= g.bound+noise
}

func (g goal) op() string {
	if g.atLeast {
		return ">="
	}
	return "<="
}

// check writes one line a goal to w and returns how many failed.
func check(figures map[string]map[string][]float64, w io.Writer) int {
	failed := 0
	for _, g := range goals {
		runs := figures[g.bench][g.unit]
		if len(runs) == 0 {
			fmt.Fprintf(w, "FAIL %s %s: no figure (goal %s %g, %s)\n", g.bench, g.unit, g.op(), g.bound, g.what)
			failed++
			continue
		}
		median, noise, ok := verdict(g, runs)
		state := "ok  "
		if !ok {
			state = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s %s: median %.3g ± %.2g over %d runs, goal %s %g (%s)\n", state, g.bench, g.unit, median, noise, len(runs), g.op(), g.bound, g.what)
	}
	for _, f := range floors {
		if runs := figures[f.bench][f.unit]; len(runs) > 0 {
			median, noise, _ := verdict(f, runs)
			fmt.Fprintf(w, "     %s %s: median %.3g ± %.2g over %d runs (%s)\n", f.bench, f.unit, median, noise, len(runs), f.what)
		}
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
