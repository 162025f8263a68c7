// Package explain tells why one RetryPolicy is or is not in force: its Ready
// condition, its place in the layer product, its worst-case schedule against
// its deadline, and its share of its budget.
package explain

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
)

// Input is what an explanation reads: the policy, the policies and budgets
// of the namespaces its chain may cross, the labels of the namespaces (nil
// when unknown), and the platform limits.
type Input struct {
	Policy     *v1.RetryPolicy
	Policies   []v1.RetryPolicy
	Budgets    []v1.RetryBudget
	Namespaces graph.Namespaces
	Limits     policygraph.Limits
}

// Write renders the explanation.
func Write(ctx context.Context, w io.Writer, in Input) error {
	p := in.Policy
	fmt.Fprintf(w, "RetryPolicy %s/%s: layer %s, %d total attempts", p.Namespace, p.Name, p.Spec.Layer.Name, p.Spec.MaxAttempts)
	if h := policygraph.LayerOf(p).Hidden; h > 1 {
		fmt.Fprintf(w, " (×%d hidden, made by an SDK or a proxy)", h)
	}
	fmt.Fprintf(w, ", calling %s", p.Spec.Target.Service)
	if op := p.Spec.Target.Operation; op != nil {
		fmt.Fprintf(w, " (%s)", *op)
	}
	fmt.Fprintln(w)
	writeReady(w, p)
	if err := writeLayers(ctx, w, in); err != nil {
		return err
	}
	writeSchedule(w, &p.Spec)
	writeBudget(w, in)
	return nil
}

func writeReady(w io.Writer, p *v1.RetryPolicy) {
	r := graph.ReadyOf(p.Status.Conditions, p.Generation)
	fmt.Fprintln(w, "\nIn force")
	switch {
	case !r.Reported:
		fmt.Fprintln(w, "  unknown: no Ready condition yet; the controller has not reconciled this policy, so its pods do not retry")
	case r.Status == "True":
		fmt.Fprintf(w, "  yes: Ready=True, reason %s: %s\n", r.Reason, r.Message)
	default:
		fmt.Fprintf(w, "  no: Ready=%s, reason %s: %s\n", r.Status, r.Reason, r.Message)
		fmt.Fprintln(w, "  Its pods do not retry while it is not Ready.")
	}
	if r.Stale {
		fmt.Fprintf(w, "  (the condition describes an older generation than %d: the controller has not caught up)\n", p.Generation)
	}
	if p.Status.ConfigMapName != "" {
		fmt.Fprintf(w, "  published in ConfigMap %s\n", p.Status.ConfigMapName)
	}
}

func writeLayers(ctx context.Context, w io.Writer, in Input) error {
	p := in.Policy
	fmt.Fprintln(w, "\nLayers")
	forest := graph.BuildIn(in.Policies, in.Budgets, in.Namespaces)
	node := forest.Nodes[graph.Key{Namespace: p.Namespace, Name: p.Name}]
	if node == nil { // not listed with the others: explain it alone
		node = graph.Build([]v1.RetryPolicy{*p}, nil).Nodes[graph.Key{Namespace: p.Namespace, Name: p.Name}]
	}
	up := node.Chain()
	fmt.Fprintf(w, "  calls per top-level operation through this policy: %s (limit %d)\n", up, in.Limits.MaxLeafAttempts)
	fmt.Fprintf(w, "  policies: %s\n", up.Policies())
	if node.MissingParent != nil {
		fmt.Fprintf(w, "  parent %s does not exist: the policy stays not Ready until it does\n", node.MissingParent)
	}
	if r := node.NotPermitted; r != nil {
		fmt.Fprintf(w, "  %s\n  the parent does not count this policy, and its pods make a single attempt\n",
			policygraph.NotPermittedMessage(*r, p.Namespace))
	}
	// The worst path through the policy, as the webhook computes it.
	a, err := analyze(ctx, in)
	if err != nil {
		return err
	}
	switch {
	case len(a.Cycle) > 0:
		fmt.Fprintf(w, "  parentRef cycle: %s\n", strings.Join(a.Cycle, " → "))
	case a.TooDeep:
		fmt.Fprintf(w, "  the chain is deeper than %d layers\n", policygraph.MaxDepth)
	case len(a.Descendants) > 0:
		worst := a.Worst()
		verdict := "within"
		if worst.Product() > in.Limits.MaxLeafAttempts {
			verdict = "ABOVE"
		}
		fmt.Fprintf(w, "  worst path through it, down to its deepest layer: %s (%s the limit of %d)\n", worst, verdict, in.Limits.MaxLeafAttempts)
	}
	return nil
}

// sleepBounds returns the shortest and the longest wait before each retry.
// The longest is policygraph's worst case; the shortest is what the runtime's
// own strategy draws when its random source always answers 0.
func sleepBounds(spec *v1.RetryPolicySpec, s policygraph.Schedule) (lo, hi []time.Duration) {
	d := spec.WithDefaults()
	strategy := backoff.Strategy{
		Jitter: backoff.Jitter(*d.Backoff.Jitter), Base: d.Backoff.Base.Duration(), Cap: d.Backoff.Cap.Duration(),
		Multiplier: *d.Backoff.Multiplier, Rand: func(int64) int64 { return 0 },
	}
	var prev time.Duration
	for i := range s.Backoffs {
		prev = strategy.Delay(i+1, prev)
		lo = append(lo, prev)
	}
	return lo, s.Backoffs
}

// writtenJitter is the jitter as the spec writes it, "" when backoff or its
// jitter is absent (the API server defaults both, so that is a spec read
// from a file).
func writtenJitter(spec *v1.RetryPolicySpec) string {
	if spec.Backoff == nil || spec.Backoff.Jitter == nil {
		return ""
	}
	return string(*spec.Backoff.Jitter)
}

func writeSchedule(w io.Writer, spec *v1.RetryPolicySpec) {
	s, rows := scheduleRows(spec)
	cost := "unbounded (no perAttemptTimeout: one attempt may use the whole deadline)"
	if s.PerAttemptTimeout > 0 {
		cost = s.PerAttemptTimeout.String() + " (perAttemptTimeout)"
	}
	fmt.Fprintf(w, "\nWorst-case schedule: deadline %s, minRemaining %s, each attempt %s, jitter %s\n",
		s.Deadline, s.MinRemaining, cost, writtenJitter(spec))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ATTEMPT\tSLEEP BEFORE\tREMAINING BEFORE SLEEP\tSTARTS AT\tENDS BY\tRUNS")
	for _, r := range rows {
		k := r.Attempt
		sleep := "-"
		if k > 1 {
			sleep = fmt.Sprintf("%s..%s", r.SleepMin, r.SleepMax)
		}
		if !r.Runs {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t-\t-\tno\n", k, sleep, r.Remaining)
			continue
		}
		start, end := r.StartsAt.String(), r.EndsBy.String()
		rem := remainingText(k, r.Remaining)
		if s.PerAttemptTimeout == 0 {
			// Attempts of unbounded cost: only the sleeps are known.
			start, end = "≥ "+start, "deadline "+s.Deadline.String()
			if k > 1 {
				rem = "≤ " + rem
			}
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\tyes\n", k, sleep, rem, start, end)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "  worst case: %d of %d attempts run, %s of the %s deadline\n", s.FeasibleAttempts, spec.MaxAttempts, s.Duration, s.Deadline)
	if s.FeasibleAttempts < spec.MaxAttempts {
		fmt.Fprintf(w, "  %s\n", s.Warning(spec.MaxAttempts))
	}
}

func remainingText(k int32, remaining time.Duration) string {
	if k == 1 {
		return "-"
	}
	return remaining.String()
}

func writeBudget(w io.Writer, in Input) {
	p := in.Policy
	fmt.Fprintln(w, "\nBudget")
	if p.Spec.BudgetRef == nil {
		fmt.Fprintln(w, "  none: the policy never retries (maxAttempts 1 needs no budget)")
		return
	}
	forest := graph.Build(in.Policies, in.Budgets)
	key, _ := policygraph.BudgetKeyOf(p)
	var b *graph.Budget
	for _, fb := range forest.Budgets {
		if fb.Key == (graph.Key{Namespace: key.Namespace, Name: key.Name}) {
			b = fb
		}
	}
	if b == nil || b.Budget == nil {
		fmt.Fprintf(w, "  RetryBudget %s does not exist: the policy is not Ready and its pods do not retry\n", key)
		return
	}
	s := b.Budget.Spec.WithDefaults()
	fmt.Fprintf(w, "  RetryBudget %s: retries at most %d%% of primary attempts over %s; bucket of %d tokens, floor %d retries/s\n",
		b.Key, s.RetryPercent, s.Window.Duration(), *s.MaxTokens, *s.MinRetriesPerSecond)
	if m := s.MaxRetriesPerSecond; m != nil {
		fmt.Fprintf(w, "  fleet allowance: at most %d retries/s across every pod that shares it\n", *m)
	}
	cfg := budget.Config{RetryPercent: s.RetryPercent, Window: s.Window.Duration(), MaxTokens: *s.MaxTokens,
		MinRetriesPerSecond: *s.MinRetriesPerSecond, Partitions: *s.Partitions, MaxRetriesPerSecond: s.MaxRetriesPerSecond}
	parts := int64(*s.Partitions)
	if s.Consumers == nil {
		fmt.Fprintf(w, "  split over %d partition(s): each pod holds %s; the %d%% ratio needs no split\n",
			parts, shareText(budget.ShareOver(cfg, parts)), s.RetryPercent)
	} else {
		counted := int64(0)
		if c := b.Budget.Status.Consumers; c != nil {
			counted = int64(*c)
		}
		fmt.Fprintf(w, "  shared by the pods matching %s: %d counted (status.consumers)\n",
			metav1.FormatLabelSelector(s.Consumers.PodSelector), counted)
		fmt.Fprintf(w, "  the pods read the count from ConfigMap %s, joined to this budget by its UID, and each pod its own shard of the members, %s "+
			"(xx: the first byte of its POD_UID's fingerprint), which names it once the count that counts it is out\n",
			policyconfig.BudgetConfigMapNameIn(p.Namespace, key.Namespace, key.Name),
			policyconfig.MemberShardConfigMapNameIn(p.Namespace, "xx", key.Namespace, key.Name))
		if counted > 0 {
			fmt.Fprintf(w, "  each pod the count names (by its POD_UID) holds %s, %s after it reads the count; the %d%% ratio needs no split\n",
				shareText(budget.ShareOver(cfg, counted)), policyconfig.ConsumerCountDelivery, s.RetryPercent)
		}
		fmt.Fprintln(w, "  a pod no count names holds nothing, whatever the count's age: a pod without POD_UID, one the selector misses, "+
			"one started while the controller is down")
		fmt.Fprintln(w, "  a pod whose policy source states no delivery bound within it holds nothing: "+
			"one that reads its policy from a mounted volume (watch.Files), or through a source of its own")
		fmt.Fprintf(w, "  with the count stale (controller down or the pod's watch cut off, %s) each pod it named holds nothing, "+
			"no retry at all until a fresh count names it: the fleet may have grown meanwhile\n", policyconfig.ConsumerCountStaleAfter)
	}
	names := make([]string, len(b.Users))
	for i, u := range b.Users {
		names[i] = u.Name
	}
	fmt.Fprintf(w, "  shared by %d policies: %s\n", len(b.Users), strings.Join(names, ", "))
	fmt.Fprintf(w, "  %s\n", readyLine(b.Budget))
}

// shareText is one pod's share of a budget's absolute figures, rounded as
// the runtime rounds them: every one down, so that the pods together never
// hold more than the budget declares.
func shareText(sh budget.Share) string {
	out := fmt.Sprintf("%d token(s) and a floor of %d retries/s", sh.Tokens, sh.MinRetriesPerSecond)
	if sh.Limited {
		out += fmt.Sprintf(", at most %d retries/s", sh.MilliRetriesPerSecond/1000)
	}
	return out + " (each rounded down)"
}

func readyLine(b *v1.RetryBudget) string {
	r := graph.ReadyOf(b.Status.Conditions, b.Generation)
	if !r.Reported {
		return "budget Ready: not reconciled yet"
	}
	return fmt.Sprintf("budget Ready=%s (%s)", r.Status, r.Reason)
}
