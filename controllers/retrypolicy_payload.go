package controllers

import (
	"math"

	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// BuildPayload turns a policy (defaults applied), its resolved budget (nil
// when absent) and the controller's verdict into the published payload.
// A budget with consumers is published Counted, without its count: the
// count is in the budget's own ConfigMap (RetryBudgetReconciler), so that a
// count change rewrites no payload. One whose selector escaped validation
// is not Counted: its pods take the conservative share, as without a count.
func BuildPayload(p *v1.RetryPolicy, budget *v1.RetryBudget, leafAttempts int64, enforcement policyconfig.Enforcement) *policyconfig.Payload {
	s := p.Spec.WithDefaults()
	dur := func(d interface{ Nanoseconds() int64 }) policyconfig.Duration {
		return policyconfig.Duration(d.Nanoseconds())
	}
	out := &policyconfig.Payload{
		SchemaVersion: policyconfig.SchemaVersion,
		Policy: policyconfig.Policy{
			Namespace:    p.Namespace,
			Name:         p.Name,
			Generation:   p.Generation,
			Service:      s.Target.Service,
			Layer:        s.Layer.Name,
			MaxAttempts:  s.MaxAttempts,
			LeafAttempts: int32(min(leafAttempts, math.MaxInt32)),
			Backoff: policyconfig.Backoff{
				Jitter:     string(*s.Backoff.Jitter),
				Base:       dur(s.Backoff.Base.Duration()),
				Cap:        dur(s.Backoff.Cap.Duration()),
				Multiplier: *s.Backoff.Multiplier,
			},
			Deadline:           dur(s.Deadline.Duration()),
			MinRemaining:       dur(s.MinRemaining.Duration()),
			RetryAfterMaxDelay: dur(s.RetryAfterMaxDelay()),
			RetryOnStatus:      append([]int32{}, s.RetryOn.StatusCodes...),
			RetryOnErrors:      make([]string, 0, len(s.RetryOn.Errors)),
			IdempotencyHeader:  *s.Idempotency.Header,
			Criticality:        string(*s.Criticality),
		},
		Enforcement: enforcement,
	}
	pol := &out.Policy
	if s.Target.Operation != nil {
		pol.Operation = *s.Target.Operation
	}
	if s.Layer.ParentRef != nil {
		pol.Parent = s.Layer.ParentRef.Name
	}
	if s.PerAttemptTimeout != nil {
		pol.PerAttemptTimeout = dur(s.PerAttemptTimeout.Duration())
	}
	for _, e := range s.RetryOn.Errors {
		pol.RetryOnErrors = append(pol.RetryOnErrors, string(e))
	}
	if t := s.Idempotency.KeyTemplate; t != nil {
		// A NoRetry verdict must reach the pods, so it never carries a
		// template that Parse would refuse (a spec that escaped CEL): one
		// attempt needs no key, and the pods would otherwise keep an older
		// Enforced payload.
		if enforcement.Mode == policyconfig.Enforced || policyconfig.CheckKeyTemplate(*t) == nil {
			pol.KeyTemplate = *t
		}
	}
	if s.BudgetRef != nil {
		pol.Budget = s.BudgetRef.Name
	}
	if h := s.Hedging; h != nil {
		pol.Hedging = &policyconfig.Hedging{MaxHedges: h.MaxHedges}
		// Both as written: one that escaped CEL with both is refused by Parse, never half-read.
		if h.Delay != nil {
			pol.Hedging.Delay = dur(h.Delay.Duration())
		}
		if l := h.Latency; l != nil {
			pol.Hedging.Percentile, pol.Hedging.Floor, pol.Hedging.Cap = l.Percentile, dur(l.Floor.Duration()), dur(l.Cap.Duration())
		}
	}
	if cp := s.ConnectionPool; cp != nil {
		pol.ConnectionPool = &policyconfig.ConnectionPool{Name: cp.Name, MaxConnections: cp.MaxConnections}
	}
	if s.Fallback != nil {
		for _, c := range s.Fallback.Channels {
			pol.Fallback = append(pol.Fallback, policyconfig.FallbackChannel{
				Name: c.Name, Endpoint: c.Endpoint, Verified: c.Verified != nil && *c.Verified,
			})
		}
	}
	if s.Events != nil && s.Events.Topic != nil {
		pol.EventsTopic = *s.Events.Topic
	}
	if budget != nil {
		b := budget.Spec.WithDefaults()
		out.Budget = &policyconfig.Budget{
			Name:                budget.Name,
			UID:                 string(budget.UID),
			Generation:          budget.Generation,
			RetryPercent:        b.RetryPercent,
			Window:              dur(b.Window.Duration()),
			MaxTokens:           *b.MaxTokens,
			MinRetriesPerSecond: *b.MinRetriesPerSecond,
			Partitions:          *b.Partitions,
		}
		if budget.Namespace != p.Namespace {
			out.Budget.Namespace = budget.Namespace
		}
		if m := b.MaxRetriesPerSecond; m != nil {
			out.Budget.MaxRetriesPerSecond = ptr.To(*m)
		}
		if sel, err := consumerSelector(budget); err == nil && sel != nil {
			out.Budget.Counted = true
		}
	}
	return out
}
