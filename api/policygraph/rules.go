package policygraph

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/codes"
)

// Verdict is what the cross-object rules say of one object.
type Verdict struct {
	Errors   field.ErrorList
	Warnings []string
	// Analysis is the policy's place in its call tree (RetryPolicy only).
	Analysis Analysis
	// Schedule is the policy's worst case (RetryPolicy only).
	Schedule Schedule
}

// Option adjusts ValidateRetryPolicy.
type Option func(*options)

type options struct {
	// mayName reports whether a message may name a policy.
	redact bool
}

// AnsweringRequester makes every error and warning name only what MayName
// allows, for a review's answer to whoever asked to store the policy:
// admission answers whoever reaches the webhook, so its messages must not
// describe other tenants' policies (docs/security.md, what a refusal
// names). Without it the messages name every layer, as the policy's own
// status and offline tools show them.
func AnsweringRequester() Option {
	return func(o *options) { o.redact = true }
}

// ValidateRetryPolicy applies every cross-object rule to p as it would be
// stored: the layer product, cycles, a parent's consent to a child from
// another namespace, shared failure domains, and the feasibility of its
// schedule. A parent that does not exist yet is a warning, because kubectl
// applies files in any order. A parent that withdraws its consent is
// admitted with a warning naming the children it drops: the parent's owner
// decides, and those children turn not Ready and stop retrying.
func ValidateRetryPolicy(ctx context.Context, lk Lookup, p *v1.RetryPolicy, limits Limits, fldPath *field.Path,
	opts ...Option) (Verdict, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	mayName := func(key types.NamespacedName) bool { return !o.redact || MayName(p, key) }
	var v Verdict
	a, err := Analyze(ctx, lk, p)
	if err != nil {
		return v, err
	}
	v.Analysis = a
	parentPath := fldPath.Child("layer", "parentRef", "name")
	named := func(l Layer) bool { return mayName(types.NamespacedName{Namespace: l.Namespace, Name: l.Policy}) }
	switch {
	case len(a.Cycle) > 0:
		v.Errors = append(v.Errors, v1.Invalid(parentPath, p.Spec.Layer.ParentRef.Name, codes.LayerCycle,
			fmt.Sprintf("layer.parentRef forms a cycle: %s; a caller cannot be its own caller", cycleMessage(p.Namespace, a.cycle, mayName))))
	case a.TooDeep:
		v.Errors = append(v.Errors, v1.Invalid(parentPath, p.Spec.Layer.ParentRef.Name, codes.LayerCycle,
			fmt.Sprintf("layer.parentRef chain is deeper than %d layers", MaxDepth)))
	default:
		if worst := a.Worst(); worst.Product() > limits.MaxLeafAttempts {
			v.Errors = append(v.Errors, v1.Invalid(fldPath.Child("maxAttempts"), p.Spec.MaxAttempts, codes.LayerAmplification,
				fmt.Sprintf("%s > %d: attempts multiply across layers (%s); lower maxAttempts so that one layer owns the retries",
					worst.render(named), limits.MaxLeafAttempts, worst.renderPolicies(named))))
		}
	}
	if r := a.NotPermitted; r != nil {
		v.Errors = append(v.Errors, v1.Invalid(fldPath.Child("layer", "parentRef", "namespace"), r.Parent.Namespace, codes.ParentNotPermitted,
			NotPermittedMessage(*r, p.Namespace)))
	}
	if len(a.Unpermitted) > 0 {
		v.Warnings = append(v.Warnings, unpermittedWarning(a.Unpermitted, FromOf(p), o.redact))
	}
	if a.MissingParent != "" {
		v.Warnings = append(v.Warnings, fmt.Sprintf(
			"layer.parentRef: RetryPolicy %q does not exist yet; this policy stays not Ready (and its pods do not retry) until it does",
			a.MissingParent))
	}
	domainErrs, err := validateFailureDomains(ctx, lk, p, fldPath)
	if err != nil {
		return v, err
	}
	v.Errors = append(v.Errors, domainErrs...)
	consentErrs, err := validateBudgetConsent(ctx, lk, p, fldPath)
	if err != nil {
		return v, err
	}
	v.Errors = append(v.Errors, consentErrs...)
	v.Schedule = WorstCase(&p.Spec)
	if v.Schedule.FeasibleAttempts < p.Spec.MaxAttempts {
		v.Warnings = append(v.Warnings, v.Schedule.Warning(p.Spec.MaxAttempts))
	}
	return v, nil
}

// NotPermittedMessage explains a parent's refusal of a child in namespace
// childNS, and the fix.
func NotPermittedMessage(r Refusal, childNS string) string {
	var why string
	switch r.From {
	case v1.NamespacesFromSelector:
		why = fmt.Sprintf("its layer.allowedChildren.namespaces.from is Selector and the selector does not match namespace %q; "+
			"ask the parent's owner to widen the selector, or label namespace %q to match it", childNS, childNS)
	default:
		why = fmt.Sprintf("its layer.allowedChildren.namespaces.from is %s, which allows child layers from its own namespace only; "+
			"ask the parent's owner to set from to All, or to Selector with a selector matching namespace %q", r.From, childNS)
	}
	return fmt.Sprintf("layer.parentRef: RetryPolicy %q does not allow child layers from namespace %q: %s", r.Parent, childNS, why)
}

// cycleMessage renders a cycle as a refusal of a policy in namespace home
// may: each key mayName allows by name (bare at home, namespace/name
// elsewhere), each run of others as its count.
func cycleMessage(home string, cycle []types.NamespacedName, mayName func(types.NamespacedName) bool) string {
	var parts []string
	for i := 0; i < len(cycle); {
		if mayName(cycle[i]) {
			parts = append(parts, displayName(cycle[i], home))
			i++
			continue
		}
		j := i + 1
		for j < len(cycle) && !mayName(cycle[j]) {
			j++
		}
		parts = append(parts, inOtherNamespaces(j-i, "policy", "policies"))
		i = j
	}
	return strings.Join(parts, " → ")
}

// unpermittedWarning names the children from other namespaces that the
// policy's layer.allowedChildren does not allow, or only counts them when
// redact is set: they are other tenants' (MayName).
func unpermittedWarning(children []types.NamespacedName, from v1.FromNamespaces, redact bool) string {
	which := inOtherNamespaces(len(children), "child layer", "child layers")
	if !redact {
		names := make([]string, len(children))
		for i, c := range children {
			names[i] = c.String()
		}
		slices.Sort(names)
		if len(names) > 3 {
			names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
		}
		which = "the child layers " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("layer.allowedChildren: namespaces.from %s does not allow %s; they are not counted in this "+
		"policy's product, turn not Ready (ParentNotPermitted), and their pods make a single attempt", from, which)
}

// validateFailureDomains: a connection pool is shared only by policies with
// the same criticality and target.service, and a budget only by policies of
// the same criticality, so that a marketing outage cannot starve 2FA.
func validateFailureDomains(ctx context.Context, lk Lookup, p *v1.RetryPolicy, fldPath *field.Path) (field.ErrorList, error) {
	var errs field.ErrorList
	crit := CriticalityOf(p)
	if pool := p.Spec.ConnectionPool; pool != nil {
		users, err := lk.PoolUsers(ctx, p.Namespace, pool.Name)
		if err != nil {
			return nil, err
		}
		if others := conflicting(users, p, func(q *v1.RetryPolicy) bool {
			return CriticalityOf(q) != crit || q.Spec.Target.Service != p.Spec.Target.Service
		}); others > 0 {
			errs = append(errs, v1.Invalid(fldPath.Child("connectionPool", "name"), pool.Name, codes.SharedFailureDomainLeak,
				fmt.Sprintf("connectionPool %q is already used by %s of another criticality or target.service; "+
					"a pool may be shared only by policies with the same criticality (%s) and target.service (%s)",
					pool.Name, policiesCount(others), crit, p.Spec.Target.Service)))
		}
	}
	if key, ok := BudgetKeyOf(p); ok {
		b := p.Spec.BudgetRef
		users, err := lk.BudgetUsers(ctx, key, ClashingCriticality(p))
		if err != nil {
			return nil, err
		}
		if others := conflicting(users, p, func(*v1.RetryPolicy) bool { return true }); others > 0 {
			errs = append(errs, v1.Invalid(fldPath.Child("budgetRef", "name"), b.Name, codes.SharedFailureDomainLeak,
				fmt.Sprintf("RetryBudget %q is already drawn on by %s of criticality %s; Critical and Standard callers must not share a retry quota",
					b.Name, policiesCount(others), ClashingCriticality(p))))
		}
	}
	return errs, nil
}

// validateBudgetConsent: a policy may draw on a budget of another namespace
// only when the budget admits the policy's namespace (BudgetAdmits). A
// budget that does not exist yet refuses nothing here: the controller
// reports BudgetNotFound until it does, and then checks its consent.
func validateBudgetConsent(ctx context.Context, lk Lookup, p *v1.RetryPolicy, fldPath *field.Path) (field.ErrorList, error) {
	key, ok := BudgetKeyOf(p)
	if !ok || key.Namespace == p.Namespace {
		return nil, nil
	}
	b, err := lk.Budget(ctx, key)
	if err != nil || b == nil {
		return nil, err
	}
	if ok, err := BudgetAdmitsNamespace(ctx, lk, b, p.Namespace); ok || err != nil {
		return nil, err
	}
	return field.ErrorList{v1.Invalid(fldPath.Child("budgetRef", "namespace"), key.Namespace, codes.BudgetNotShared,
		BudgetNotSharedMessage(key, ConsumersFrom(b), p.Namespace))}, nil
}

// BudgetNotSharedMessage explains a budget's refusal of a policy of
// namespace ns, and the fix.
func BudgetNotSharedMessage(budget types.NamespacedName, from v1.FromNamespaces, ns string) string {
	why := "its consumers.namespaces.from is Same"
	if from == v1.NamespacesFromSelector {
		why = fmt.Sprintf("its consumers.namespaces.from is Selector and the selector does not match namespace %q", ns)
	}
	return fmt.Sprintf("RetryBudget %s does not admit namespace %q: %s; ask the budget's owner to admit it, "+
		"or name a RetryBudget of namespace %q. Until then this policy is not Ready and its pods make a single attempt", budget, ns, why, ns)
}

// conflicting counts the users other than self that clash. A refusal
// names only what the request referenced (the pool, the budget), never
// another policy: the requester may not be allowed to read them, and
// admission must not tell an anonymous caller they exist (docs/security.md,
// tenant boundaries).
func conflicting(users []v1.RetryPolicy, self *v1.RetryPolicy, clash func(*v1.RetryPolicy) bool) int {
	n := 0
	for i := range users {
		// A budget's users span namespaces: self is its namespace and name.
		if q := &users[i]; (q.Namespace != self.Namespace || q.Name != self.Name) && clash(q) {
			n++
		}
	}
	return n
}

// policiesCount is "1 policy" or "n policies".
func policiesCount(n int) string {
	if n == 1 {
		return "1 policy"
	}
	return fmt.Sprintf("%d policies", n)
}

// CriticalityOf is p's criticality, the default when unset.
func CriticalityOf(p *v1.RetryPolicy) v1.Criticality {
	if p.Spec.Criticality == nil {
		return v1.DefaultCriticality
	}
	return *p.Spec.Criticality
}

// ClashingCriticality is the criticality whose callers may not share a
// budget with p: the other one.
func ClashingCriticality(p *v1.RetryPolicy) v1.Criticality {
	if CriticalityOf(p) == v1.CriticalityCritical {
		return v1.CriticalityStandard
	}
	return v1.CriticalityCritical
}

// AboveRetryPercentCap is the platform's cap on a budget, judged and
// worded once, for admission (ERR_BUDGET_ABOVE_PLATFORM_CAP) and for the
// budget's status (AbovePlatformCap, where admission was bypassed): the
// reason b's retryPercent is above it, or "" when it is not.
func (l Limits) AboveRetryPercentCap(b *v1.RetryBudget) string {
	if b.Spec.RetryPercent <= l.MaxRetryPercent {
		return ""
	}
	return fmt.Sprintf("retryPercent %d is above the platform cap of %d%% (--max-retry-percent); "+
		"retries beyond it turn a dependency's bad minute into a storm", b.Spec.RetryPercent, l.MaxRetryPercent)
}

// ValidateRetryBudget applies the platform's cap to a budget.
func ValidateRetryBudget(b *v1.RetryBudget, limits Limits, fldPath *field.Path) Verdict {
	var v Verdict
	if msg := limits.AboveRetryPercentCap(b); msg != "" {
		v.Errors = append(v.Errors, v1.Invalid(fldPath.Child("retryPercent"), b.Spec.RetryPercent, codes.BudgetAbovePlatformCap, msg))
	}
	if f := b.Spec.MinRetriesPerSecond; f != nil && *f > 0 {
		v.Warnings = append(v.Warnings, fmt.Sprintf(
			"minRetriesPerSecond: %d retries/s are allowed whatever the ratio while a pod's window holds fewer primaries than its start credit, "+
				"so a caller below %d primary requests/s may retry above %d%% until it holds them; past them the ratio rules",
			*f, int64(*f)*100/int64(max(b.Spec.RetryPercent, 1)), b.Spec.RetryPercent))
	}
	partitions := *b.Spec.WithDefaults().Partitions
	if m := b.Spec.MaxRetriesPerSecond; m != nil && *m > 0 && *m < partitions && b.Spec.Consumers == nil {
		// Without consumers a pod's share is the allowance over partitions
		// (with them, over the count that names it), rounded down to whole
		// retries a second so that the pods together never exceed it: below
		// one, a pod does not retry.
		v.Warnings = append(v.Warnings, fmt.Sprintf(
			"maxRetriesPerSecond: %d retries/s shared by up to %d partitions is below one retry/s per pod; a pod taking the conservative share (1/%d) does "+
				"not retry at all",
			*m,
			partitions,
			partitions,
		))
	}
	return v
}
