package explain

import (
	"context"
	"time"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

// Row is one attempt of the worst-case schedule, as the table shows it.
type Row struct {
	Attempt int32
	// SleepMin and SleepMax bound the wait before it (zero for the first).
	SleepMin, SleepMax time.Duration
	// Remaining is the deadline left when the retry is decided.
	Remaining time.Duration
	// StartsAt and EndsBy are set when it runs.
	StartsAt, EndsBy time.Duration
	Runs             bool
}

// scheduleRows is the worst-case schedule of spec, one row per attempt:
// every attempt takes the schedule's PerAttemptTimeout and every wait its longest.
func scheduleRows(spec *v1.RetryPolicySpec) (policygraph.Schedule, []Row) {
	s := policygraph.WorstCase(spec)
	lo, hi := sleepBounds(spec, s)
	var rows []Row
	var elapsed time.Duration
	for k := int32(1); k <= spec.MaxAttempts; k++ {
		r := Row{Attempt: k, Remaining: s.Deadline - elapsed, Runs: k <= s.FeasibleAttempts}
		if k > 1 {
			r.SleepMin, r.SleepMax = lo[k-2], hi[k-2]
		}
		if r.Runs {
			elapsed += r.SleepMax
			r.StartsAt = elapsed
			elapsed += s.PerAttemptTimeout
			r.EndsBy = elapsed
		}
		rows = append(rows, r)
	}
	return s, rows
}

// Explain is the explanation as data: what Write prints, for -o json|yaml.
func Explain(ctx context.Context, in Input) (output.Explanation, error) {
	p := in.Policy
	ready := graph.ReadyOf(p.Status.Conditions, p.Generation)
	e := output.Explanation{
		TypeMeta: output.Meta(output.KindExplanation),
		Policy: output.ExplainedPolicy{Namespace: p.Namespace, Name: p.Name, Layer: p.Spec.Layer.Name, MaxAttempts: p.Spec.MaxAttempts,
			Service: p.Spec.Target.Service, ConfigMap: p.Status.ConfigMapName},
		InForce: ready.Reported && ready.Status == "True",
		Ready:   condition(ready),
	}
	if h := policygraph.LayerOf(p).Hidden; h > 1 {
		e.Policy.HiddenAttempts = h
	}
	if op := p.Spec.Target.Operation; op != nil {
		e.Policy.Operation = *op
	}
	if err := explainLayers(ctx, in, &e.Layers); err != nil {
		return e, err
	}
	s, rows := scheduleRows(&p.Spec)
	e.Schedule = output.ExplainedSchedule{Deadline: s.Deadline.String(), MinRemaining: s.MinRemaining.String(),
		Jitter: writtenJitter(&p.Spec), FeasibleAttempts: s.FeasibleAttempts, Duration: s.Duration.String(),
		Attempts: []output.ScheduledAttempt{}}
	if s.PerAttemptTimeout > 0 {
		e.Schedule.PerAttemptTimeout = s.PerAttemptTimeout.String()
	}
	if s.FeasibleAttempts < p.Spec.MaxAttempts {
		e.Schedule.Warning = s.Warning(p.Spec.MaxAttempts)
	}
	for _, r := range rows {
		a := output.ScheduledAttempt{Attempt: r.Attempt, Runs: r.Runs}
		if r.Attempt > 1 {
			a.SleepMin, a.SleepMax, a.RemainingBeforeSleep = r.SleepMin.String(), r.SleepMax.String(), r.Remaining.String()
		}
		if r.Runs && s.PerAttemptTimeout > 0 {
			a.StartsAt, a.EndsBy = r.StartsAt.String(), r.EndsBy.String()
		}
		e.Schedule.Attempts = append(e.Schedule.Attempts, a)
	}
	e.Budget = explainBudget(in)
	return e, nil
}

func explainLayers(ctx context.Context, in Input, l *output.ExplainedLayers) error {
	p := in.Policy
	forest := graph.BuildIn(in.Policies, in.Budgets, in.Namespaces)
	node := forest.Nodes[graph.Key{Namespace: p.Namespace, Name: p.Name}]
	if node == nil {
		node = graph.Build([]v1.RetryPolicy{*p}, nil).Nodes[graph.Key{Namespace: p.Namespace, Name: p.Name}]
	}
	up := node.Chain()
	*l = output.ExplainedLayers{Path: up.String(), Product: up.Product(), Limit: in.Limits.MaxLeafAttempts, Policies: []string{}}
	for _, cur := range chainNodes(node) {
		l.Policies = append(l.Policies, cur.Key.String())
	}
	if node.MissingParent != nil {
		l.MissingParent = node.MissingParent.String()
	}
	if r := node.NotPermitted; r != nil {
		l.NotPermitted = policygraph.NotPermittedMessage(*r, p.Namespace)
	}
	a, err := analyze(ctx, in)
	if err != nil {
		return err
	}
	switch {
	case len(a.Cycle) > 0:
		l.Cycle = a.Cycle
	case a.TooDeep:
		l.TooDeep = true
	case len(a.Descendants) > 0:
		worst := a.Worst()
		l.WorstPath, l.WorstProduct = worst.String(), worst.Product()
	}
	return nil
}

// analyze is the worst path through in.Policy, as the webhook computes it,
// over the policies and namespaces the input holds. Write and Explain
// both print it.
func analyze(ctx context.Context, in Input) (policygraph.Analysis, error) {
	lookup := policygraph.NewStaticLookup(in.Policies...)
	for ns, labels := range in.Namespaces {
		lookup.WithNamespace(ns, labels)
	}
	return policygraph.Analyze(ctx, lookup, in.Policy)
}

// chainNodes are the nodes of n.Chain(), root first.
func chainNodes(n *graph.Node) []*graph.Node {
	var out []*graph.Node
	for cur := n; cur != nil; cur = cur.Parent {
		out = append([]*graph.Node{cur}, out...)
		if cur.NotPermitted != nil {
			break
		}
	}
	return out
}

func explainBudget(in Input) *output.ExplainedBudget {
	p := in.Policy
	if p.Spec.BudgetRef == nil {
		return nil
	}
	key := graph.Key{Namespace: p.Namespace, Name: p.Spec.BudgetRef.Name}
	out := &output.ExplainedBudget{Namespace: key.Namespace, Name: key.Name}
	for _, fb := range graph.Build(in.Policies, in.Budgets).Budgets {
		if fb.Key != key || fb.Budget == nil {
			continue
		}
		s := fb.Budget.Spec.WithDefaults()
		out.Exists = true
		out.RetryPercent, out.Window, out.MaxTokens = s.RetryPercent, s.Window.Duration().String(), *s.MaxTokens
		out.MinRetriesPerSecond, out.MaxRetriesPerSecond, out.Partitions = *s.MinRetriesPerSecond, s.MaxRetriesPerSecond, *s.Partitions
		for _, u := range fb.Users {
			out.UsedBy = append(out.UsedBy, u.String())
		}
		c := condition(graph.ReadyOf(fb.Budget.Status.Conditions, fb.Budget.Generation))
		out.Ready = &c
	}
	return out
}

// condition is a Ready condition as output shows it.
func condition(r graph.Ready) output.Condition {
	return output.Condition{Status: string(r.Status), Reason: r.Reason, Message: r.Message, Reported: r.Reported, Stale: r.Stale}
}
