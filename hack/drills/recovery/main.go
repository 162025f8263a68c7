// Command recovery is the spec's telephony retry recovery drill (MC-RT-01)
// in real time: three retry strategies drive the same open-loop load, each
// through the real HTTP stack against its own loopback fake telephony
// provider that answers 429 to most attempts during a fault window and bans
// a caller over the contracted rate. Option C is Retryguard, under the
// sample policy as the controller publishes it. The exit status is C's
// verdict: 0 when it meets the spec, 1 when it does not, 2 when the drill
// could not run. See docs/drill.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Defaults: MC-RT-01's figures.
const (
	DefaultRPS       = 1200
	DefaultFault     = 45 * time.Second
	DefaultFaultRate = 0.6
	DefaultAfter     = 15 * time.Second
	// DefaultLatency is the virtual-clock drill's latency, within the spec's
	// baseline (< 120 ms).
	DefaultLatency = 100 * time.Millisecond
	// QuickFault and QuickAfter scale the drill to about 20 s for CI.
	QuickFault = 12 * time.Second
	QuickAfter = 6 * time.Second
	// BanHeadroom is the carrier's tolerance over the primary rate: 1,200 × 1.1 = 1,320/s.
	BanHeadroom = 1.10
	// BaselineEvery: one first attempt in 2,000 fails after the fault (< 1%).
	BaselineEvery = 2000
	// MinProcs is the drill's least GOMAXPROCS.
	MinProcs = 8
)

// Exit statuses.
const (
	exitPass = 0
	// exitFail: Option C missed a mark of the spec.
	exitFail = 1
	// exitBroken: the drill could not run.
	exitBroken = 2
	// exitInconclusive: C missed only a timing mark (a ban, the recovery)
	// while the machine kept the load from arriving on schedule.
	exitInconclusive = 3
)

type config struct {
	rps                   int
	fault, after          time.Duration
	faultRate             float64
	latency, retryAfter   time.Duration
	options               []string
	out, samples          string
	kubeconfig, namespace string
	journal, broken       string
	queueOutage           time.Duration
	cpuProfile            string
	quick                 bool
}

func main() {
	log.SetFlags(0)
	// The drill allocates little that lives long; collecting less often
	// leaves more of a shared machine's CPU to the load itself.
	debug.SetGCPercent(400)
	// On a machine shared with other work the scheduler shares CPU by
	// thread: more threads than cores let the drill claim the little CPU it
	// needs (about half a core) when it needs it, so that the load arrives
	// on schedule. It never needs more, so it takes no more.
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), MinProcs))
	cfg, err := parseFlags(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case errors.Is(err, errUsage):
		os.Exit(exitBroken) // the flag package has said why
	case err != nil:
		log.Print(err)
		os.Exit(exitBroken)
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Print(err)
			os.Exit(exitBroken)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := run(cfg)
	if err != nil {
		log.Printf("drill: %v", err)
		os.Exit(exitBroken)
	}
	if !slices.Contains(cfg.options, "C") {
		log.Print("Option C did not run: the exit status judges nothing")
		return
	}
	if !rep.Pass {
		pprof.StopCPUProfile()
		if rep.Inconclusive != "" {
			log.Printf("INCONCLUSIVE: Option C missed only timing marks while %s; run it on a quieter machine", rep.Inconclusive)
			os.Exit(exitInconclusive)
		}
		os.Exit(exitFail)
	}
}

// errUsage marks a command line the flag package refused (and explained).
var errUsage = errors.New("usage")

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("run_telephony_retry_recovery_drill", flag.ContinueOnError)
	var c config
	var opts string
	fs.IntVar(&c.rps, "rps", DefaultRPS, "logical requests per second, offered open-loop to each option")
	fs.DurationVar(&c.fault, "fault", DefaultFault, "how long the vendor answers 429, from the start")
	fs.Float64Var(&c.faultRate, "fault-rate", DefaultFaultRate, "the share of attempts answered 429 during the fault")
	fs.DurationVar(&c.after, "after", DefaultAfter, "how long the load runs on after the fault")
	fs.DurationVar(&c.latency, "latency", DefaultLatency, "how long the vendor takes to answer")
	fs.DurationVar(&c.retryAfter, "retry-after", 0, "a Retry-After the vendor sends with every 429 (0: none)")
	fs.StringVar(&opts, "options", "A,B,C", "the options to run side by side")
	fs.StringVar(&c.out, "out", "", "a directory for report.json and drill.png")
	fs.BoolVar(&c.quick, "quick", false, "scale the drill to about 20 s (a 12 s fault, 6 s after)")
	fs.StringVar(&c.samples, "samples", "config/samples", "the manifests holding the sample policy")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "read the policy from this cluster's published ConfigMaps (make dev-cluster) instead")
	fs.StringVar(&c.namespace, "namespace", "default", "the namespace the policy is published in")
	fs.StringVar(&c.journal, "journal", "", "the dead-letter journal's path (default: a fresh file in the temporary directory, on disk)")
	fs.DurationVar(
		&c.queueOutage,
		"queue-outage",
		-1,
		"how long the fallback queue's broker is down, from a third of the fault (default: a quarter of the fault; 0: never)",
	)
	fs.StringVar(&c.broken, "break", "", `"budget" lifts the limits of Option C's budget (100%, 1,000 tokens) after the watcher, to show the drill failing`)
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the drill's own CPU profile here")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		if !set["fault"] {
			c.fault = QuickFault
		}
		if !set["after"] {
			c.after = QuickAfter
		}
	}
	for o := range strings.SplitSeq(opts, ",") {
		o = strings.ToUpper(strings.TrimSpace(o))
		if o != "A" && o != "B" && o != "C" {
			return c, fmt.Errorf("--options: %q is not A, B or C", o)
		}
		if !slices.Contains(c.options, o) {
			c.options = append(c.options, o)
		}
	}
	slices.Sort(c.options)
	switch {
	case c.rps < 1 || c.rps > 20000:
		return c, fmt.Errorf("--rps %d is outside 1–20,000", c.rps)
	case c.fault < 0 || c.after < 0 || c.fault+c.after < time.Second || c.fault+c.after > 10*time.Minute:
		return c, fmt.Errorf("--fault %v plus --after %v must last 1 s to 10 min", c.fault, c.after)
	case c.faultRate < 0 || c.faultRate > 1:
		return c, fmt.Errorf("--fault-rate %v is outside 0–1", c.faultRate)
	case c.latency < 0 || c.latency > time.Second:
		return c, fmt.Errorf("--latency %v is outside 0–1s", c.latency)
	case c.retryAfter < 0:
		return c, fmt.Errorf("--retry-after %v is negative", c.retryAfter)
	case c.broken != "" && c.broken != "budget":
		return c, fmt.Errorf(`--break %q: the only breakage is "budget"`, c.broken)
	}
	return c, nil
}

// unbudgeted serves the watcher's policies with their budgets' limits
// lifted: a retry for every success, a full bucket of the most tokens a
// payload may hold. Removing the budget outright cannot break Option C: the
// controller publishes such a policy NoRetry, the watcher refuses such a
// payload, and the runtime never retries without a budget.
type unbudgeted struct{ retry.Source }

func (s unbudgeted) Policy(name string) (*policyconfig.Payload, bool) {
	p, ok := s.Source.Policy(name)
	if !ok || p.Budget == nil {
		return p, ok
	}
	cp, b := *p, *p.Budget
	b.RetryPercent, b.MaxTokens = 100, 1000
	cp.Budget = &b
	return &cp, true
}

func run(cfg config) (*report, error) {
	horizon := cfg.fault + cfg.after
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Everything ends by itself: operations live at most a few seconds.
	ctx, cancel := context.WithTimeout(ctx, horizon+2*time.Minute)
	defer cancel()

	// On disk, not tmpfs: the journal's fsyncs are real (docs/drill.md).
	tmp, err := os.MkdirTemp("", "retryguard-drill-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	src := policySource{Kind: "files", Where: filepath.Join(tmp, "policies"), Namespace: cfg.namespace}
	if cfg.kubeconfig != "" {
		src = policySource{Kind: "informer", Where: cfg.kubeconfig, Namespace: cfg.namespace}
	} else {
		payload, err := samplePayload(cfg.samples, samplePolicy, cfg.namespace)
		if err != nil {
			return nil, err
		}
		if err := publishFiles(src.Where, payload); err != nil {
			return nil, err
		}
	}
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching() // before the directory goes
	w, err := startWatcher(watching, src)
	if err != nil {
		return nil, err
	}
	published, _ := w.Policy(samplePolicy)
	var source retry.Source = w
	if cfg.broken == "budget" {
		source = unbudgeted{w}
	}
	journalPath := cfg.journal
	if journalPath == "" {
		journalPath = filepath.Join(tmp, "dead-letters.journal")
	}
	journal, err := deadletter.Open(journalPath)
	if err != nil {
		return nil, err
	}
	defer journal.Close()
	q, err := startQueue(filepath.Join(tmp, "broker"), journal)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	ex := retry.New(source, retry.WithDeadLetters(journal), retry.WithMetrics(retry.NewMetrics(reg)))
	rt := &retry.RoundTripper{Executor: ex, Policy: samplePolicy, Pools: &retry.Pools{New: transport}}

	sc := scenario{Fault: cfg.fault, FaultRate: cfg.faultRate, RetryAfter: cfg.retryAfter, Latency: cfg.latency,
		BanLimit: int(float64(cfg.rps) * BanHeadroom), RPS: cfg.rps, BaselineEvery: BaselineEvery}
	rep := &report{
		Scenario: scenarioReport{RPS: cfg.rps, FaultSeconds: cfg.fault.Seconds(), FaultRate: cfg.faultRate,
			AfterSeconds: cfg.after.Seconds(), LatencyMs: ms(cfg.latency), RetryAfterSeconds: cfg.retryAfter.Seconds(),
			BanLimit: sc.BanLimit, BaselineEvery: BaselineEvery, Quick: cfg.quick, Broken: cfg.broken},
		Policy:  describe(src, published, journalPath),
		Machine: machineReport{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), LoadAvgStart: loadavg()},
	}
	log.Printf("policy %s from %s %s: %s, %d attempts, %s jitter, budget %d%%, pool %d connections",
		samplePolicy, src.Kind, src.Where, rep.Policy.Enforcement, rep.Policy.MaxAttempts, rep.Policy.Jitter,
		rep.Policy.BudgetPct, rep.Policy.Pool)
	if cfg.broken != "" {
		log.Printf("BROKEN on purpose: Option C runs with its %s's limits lifted", cfg.broken)
	}
	log.Printf("%d logical req/s for %v: 429 on %.0f%% of attempts until %v, ban over %d/s; load average %s",
		cfg.rps, horizon, cfg.faultRate*100, cfg.fault, sc.BanLimit, rep.Machine.LoadAvgStart)

	// Start a little ahead, so that every listener is up and every
	// connection open when the first operation is due.
	start := time.Now().Add(time.Second)
	outage := cfg.queueOutage
	if outage < 0 {
		outage = cfg.fault / 4
	}
	q.breakAt(start, cfg.fault/3, outage)
	labels := map[string]string{"A": "A: 5 attempts, 500 ms constant, no budget",
		"B": "B: exponential without jitter, 3 attempts, no budget", "C": "C: Retryguard (full jitter + 10% budget)"}
	total := int(horizon.Seconds() * float64(cfg.rps))
	var opts []*option
	for _, name := range cfg.options {
		v := newVendor(sc, start)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: v, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			Protocols: new(http.Protocols)}
		srv.Protocols.SetUnencryptedHTTP2(true)
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		label := labels[name]
		if name == "C" && cfg.broken != "" {
			label = "C: Retryguard with its budget's limits lifted (broken on purpose)"
		}
		o := &option{Name: name, Label: label, vendor: v, url: "http://" + ln.Addr().String() + "/v1/messages",
			transport: transport(loopConns), result: make([]outcome, total)}
		switch name {
		case "A":
			o.do = optionA(o.transport, o.url)
		case "B":
			o.do = optionB(o.transport, o.url)
		case "C":
			o.do = optionC(rt, o.url)
		}
		opts = append(opts, o)
	}

	if err := warm(ctx, opts, rt, published); err != nil {
		return nil, err
	}
	lg := &logger{start: start, opts: opts, reg: reg}
	sampling, stopSampling := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); lg.sample(sampling) }()
	rep.Generator = generate(ctx, start, cfg.rps, horizon, opts)
	stopSampling()
	<-done
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	lg.flush(lg.seconds())
	want := map[string]bool{} // Option C's dead letters, by key
	for _, o := range opts {
		for op, r := range o.result {
			if o.Name == "C" && (r == failed || r == budgetDenied) {
				want[key(op)] = true
			}
		}
	}
	var queued map[string]bool
	rep.Queue, queued, err = q.drain(want, journalPath)
	if err != nil {
		log.Printf("the fallback queue: %v", err) // the letters it missed are lost, and judged so
	}
	if err := journal.Close(); err != nil {
		return nil, err
	}
	rep.Machine.LoadAvgEnd = loadavg()
	var primaries [][]int
	for _, o := range opts {
		or := summarize(o, sc, cfg, lg, queued)
		rep.Options = append(rep.Options, or)
		primaries = append(primaries, or.Series.Primary)
	}
	rep.OffSchedule = offSchedule(primaries, cfg.rps, int(horizon.Seconds()), rep.Generator.MaxLateMs)
	for _, or := range rep.Options {
		if or.Name == "C" {
			rep.Pass = or.Verdict.Pass
			if or.Verdict.TimingOnly && rep.OffSchedule != "" {
				rep.Inconclusive = rep.OffSchedule
			}
		}
	}
	printSummary(rep)
	if cfg.out != "" {
		if err := writeOut(cfg.out, rep); err != nil {
			return nil, err
		}
		log.Printf("wrote %s and %s", filepath.Join(cfg.out, "report.json"), filepath.Join(cfg.out, "drill.png"))
	}
	return rep, nil
}

func describe(src policySource, p *policyconfig.Payload, journal string) policyReport {
	r := policyReport{Source: src, Name: samplePolicy, Journal: journal}
	if p == nil {
		return r
	}
	r.Enforcement = string(p.Enforcement.Mode)
	r.MaxAttempts = p.Policy.MaxAttempts
	r.Jitter = p.Policy.Backoff.Jitter
	if p.Budget != nil {
		r.BudgetPct = p.Budget.RetryPercent
	}
	if p.Policy.ConnectionPool != nil {
		r.Pool = p.Policy.ConnectionPool.MaxConnections
	}
	return r
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// logger prints one line per second of the drill, and samples C's budget.
type logger struct {
	start time.Time
	opts  []*option
	reg   *prometheus.Registry

	mu      sync.Mutex
	printed int
	tokens  []float64
}

func (l *logger) seconds() int {
	n := 0
	for _, o := range l.opts {
		o.vendor.mu.Lock()
		n = max(n, len(o.vendor.seconds))
		o.vendor.mu.Unlock()
		o.mu.Lock()
		n = max(n, len(o.ended))
		o.mu.Unlock()
	}
	return n
}

// sample prints second k once it is over, until ctx ends.
func (l *logger) sample(ctx context.Context) {
	for k := 1; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(l.start.Add(time.Duration(k)*time.Second + 100*time.Millisecond))):
		}
		l.mu.Lock()
		l.tokens = append(l.tokens, budgetTokens(l.reg))
		l.mu.Unlock()
		l.flush(k)
	}
}

// flush prints every second before upTo not yet printed.
func (l *logger) flush(upTo int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; l.printed < upTo; l.printed++ {
		k := l.printed
		var b strings.Builder
		fmt.Fprintf(&b, "t=%3ds", k)
		for _, o := range l.opts {
			v, e := o.vendor.second(k), o.endedIn(k)
			fmt.Fprintf(&b, " | %s primary %4d outbound %4d retries %4d 429s %4d", o.Name, v.Primary, v.Outbound, v.Retries, v.Status429)
			if o.Name == "C" {
				fmt.Fprintf(&b, " denied %4d dead-letters %4d", e.BudgetDenied, e.Failed)
				if k < len(l.tokens) {
					fmt.Fprintf(&b, " tokens %5.1f", l.tokens[k])
				}
			} else {
				fmt.Fprintf(&b, " failed %4d", e.Failed)
			}
		}
		log.Print(b.String())
	}
}

// budgetTokens reads the budget gauge the runtime exports (summed over
// budgets; the drill has one).
func budgetTokens(reg *prometheus.Registry) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == "retryguard_budget_tokens" {
			for _, m := range f.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// summarize builds an option's series, summary and verdict. Every offered
// operation is accounted for exactly: Option C's failures must each have
// reached the fallback queue (queued, by key); Options A and B have none,
// so theirs are lost.
func summarize(o *option, sc scenario, cfg config, lg *logger, queued map[string]bool) optionReport {
	n := lg.seconds()
	var s series
	for k := range n {
		v, e := o.vendor.second(k), o.endedIn(k)
		s.Primary = append(s.Primary, v.Primary)
		s.Outbound = append(s.Outbound, v.Outbound)
		s.Retries = append(s.Retries, v.Retries)
		s.Status429 = append(s.Status429, v.Status429)
		s.Dispatched = append(s.Dispatched, e.Dispatched)
		s.Failed = append(s.Failed, e.Failed)
		s.BudgetDenials = append(s.BudgetDenials, e.BudgetDenied)
		if o.Name == "C" {
			s.DeadLetters = append(s.DeadLetters, e.Failed)
		} else {
			s.DeadLetters = append(s.DeadLetters, 0)
		}
	}
	if o.Name == "C" {
		lg.mu.Lock()
		s.BudgetTokens = append([]float64(nil), lg.tokens...)
		lg.mu.Unlock()
	}
	journaled := queued
	if o.Name != "C" {
		journaled = nil
	}
	var sum summary
	for op, r := range o.result {
		sum.Offered++
		switch {
		case r == dispatched:
			sum.Dispatched++
		case (r == failed || r == budgetDenied) && journaled[key(op)]:
			sum.DeadLettered++
		default:
			sum.Lost++
		}
	}
	v := o.vendor
	v.mu.Lock()
	sum.PeakWindow = v.ledger.peak
	sum.Bans = len(v.ledger.bans)
	sum.RetryBans = len(v.ledger.retryBans)
	sum.PeakRetryWindow = v.ledger.peakRetries
	if sum.Bans > 0 {
		sum.FirstBanSeconds = v.ledger.bans[0].Seconds()
	}
	if v.faultPrimaries > 0 {
		sum.AmplificationDuringFault = float64(v.faultAttempts) / float64(v.faultPrimaries)
	}
	sum.RecoverySeconds = recoveryLag(v.lateRetries, sc.Fault).Seconds()
	v.mu.Unlock()
	sum.PeakOutbound = slices.Max(append([]int{0}, s.Outbound...))
	sum.MaxBucketRatio, sum.MaxRatioSecond = bucketRatio(s.Primary, s.Outbound, int((cfg.fault + cfg.after).Seconds()))
	return optionReport{Name: o.Name, Label: o.Label, Series: s, Summary: sum, Verdict: judge(sum, sc.BanLimit, sc.BanLimit-sc.RPS)}
}

func printSummary(rep *report) {
	log.Printf("timing metrics (load average %s at the start, %s at the end; arrivals at most %.1f ms late, %d over 10 ms):",
		rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd, rep.Generator.MaxLateMs, rep.Generator.LateOver10ms)
	if rep.OffSchedule != "" {
		log.Printf("the machine kept the load off schedule: %s", rep.OffSchedule)
	}
	log.Printf("%-6s %12s %11s %13s %14s %14s %10s %5s %s", "option", "peak req/s", "peak window", "out/primary",
		"worst second", "recovery", "lost", "bans", "verdict")
	for _, o := range rep.Options {
		s := o.Summary
		verdict := "PASS"
		if !o.Verdict.Pass {
			verdict = "FAIL"
		}
		log.Printf("%-6s %12d %11d %12.3fx %13.2fx %13.2fs %10d %5d %s", o.Name, s.PeakOutbound, s.PeakWindow,
			s.AmplificationDuringFault, s.MaxBucketRatio, s.RecoverySeconds, s.Lost, s.Bans, verdict)
	}
	for _, o := range rep.Options {
		for _, f := range o.Verdict.Failures {
			log.Printf("%s: FAIL: %s", o.Name, f)
		}
		for _, w := range o.Verdict.Warnings {
			log.Printf("%s: warning: %s", o.Name, w)
		}
		log.Printf("%s: %d offered, %d dispatched, %d dead-lettered, %d lost", o.Name, o.Summary.Offered,
			o.Summary.Dispatched, o.Summary.DeadLettered, o.Summary.Lost)
	}
	qr := rep.Queue
	log.Printf("fallback queue %s (%s): broker killed at %.1f s, back at %.1f s; %d letters forwarded from the journal on %s, "+
		"%d records read back, %d of C's dead letters delivered; %d left in the journal (%d bytes), %d failed batches shipped again",
		qr.Topic, qr.Broker, qr.BrokerKilledAt, qr.BrokerBackAt, qr.Forwarded, qr.JournalFS, qr.Records, qr.Delivered,
		qr.LeftInJournal, qr.JournalBytes, qr.Failures)
}
