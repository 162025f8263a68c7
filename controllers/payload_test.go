package controllers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/internal/testenv"
)

// specOf rebuilds a RetryPolicySpec from a parsed payload: the inverse of
// BuildPayload, written independently so the test can catch a lost field.
func specOf(p *policyconfig.Policy) v1.RetryPolicySpec {
	d := func(x policyconfig.Duration) *v1.Duration { return ptr.To(v1.DurationOf(time.Duration(x))) }
	s := v1.RetryPolicySpec{
		Target:      v1.RetryTarget{Service: p.Service},
		Layer:       v1.RetryLayer{Name: p.Layer},
		MaxAttempts: p.MaxAttempts,
		Backoff: &v1.Backoff{Jitter: ptr.To(v1.JitterMode(p.Backoff.Jitter)), Base: d(p.Backoff.Base), Cap: d(p.Backoff.Cap),
			Multiplier: ptr.To(p.Backoff.Multiplier)},
		Deadline:     *d(p.Deadline),
		MinRemaining: d(p.MinRemaining),
		RetryAfter:   &v1.RetryAfter{MaxDelay: d(p.RetryAfterMaxDelay)},
		RetryOn:      &v1.RetryOn{StatusCodes: p.RetryOnStatus},
		Idempotency:  &v1.Idempotency{Header: ptr.To(p.IdempotencyHeader)},
		Criticality:  ptr.To(v1.Criticality(p.Criticality)),
	}
	for _, e := range p.RetryOnErrors {
		s.RetryOn.Errors = append(s.RetryOn.Errors, v1.TransportError(e))
	}
	if p.Operation != "" {
		s.Target.Operation = ptr.To(p.Operation)
	}
	if p.Parent != "" {
		s.Layer.ParentRef = &v1.ParentReference{Name: p.Parent}
	}
	if p.PerAttemptTimeout != 0 {
		s.PerAttemptTimeout = d(p.PerAttemptTimeout)
	}
	if p.KeyTemplate != "" {
		s.Idempotency.KeyTemplate = ptr.To(p.KeyTemplate)
	}
	if p.Budget != "" {
		s.BudgetRef = &v1.BudgetReference{Name: p.Budget}
	}
	if p.ConnectionPool != nil {
		s.ConnectionPool = &v1.ConnectionPool{Name: p.ConnectionPool.Name, MaxConnections: p.ConnectionPool.MaxConnections}
	}
	if len(p.Fallback) > 0 {
		s.Fallback = &v1.Fallback{}
		for _, c := range p.Fallback {
			s.Fallback.Channels = append(s.Fallback.Channels, v1.FallbackChannel{Name: c.Name, Endpoint: c.Endpoint, Verified: ptr.To(c.Verified)})
		}
	}
	if p.EventsTopic != "" {
		s.Events = &v1.Events{Topic: ptr.To(p.EventsTopic)}
	}
	return s
}

func TestEverySampleRoundTrips(t *testing.T) {
	budgets := map[string]*v1.RetryBudget{}
	for _, f := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml"} {
		b := testenv.Sample[v1.RetryBudget](t, f)
		b.Generation = 4
		budgets[b.Name] = b
	}
	for _, f := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
		t.Run(f, func(t *testing.T) {
			p := testenv.Sample[v1.RetryPolicy](t, f)
			p.Namespace, p.Generation = "auth", 2
			budget := budgets[p.Spec.BudgetRef.Name]
			raw, err := policyconfig.Marshal(controllers.BuildPayload(p, budget, 3, policyconfig.Enforcement{Mode: policyconfig.Enforced}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := policyconfig.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := p.Spec.WithDefaults()
			if want.RetryAfter.MaxDelay == nil { // published as derived from the deadline
				want.RetryAfter.MaxDelay = ptr.To(v1.DurationOf(want.RetryAfterMaxDelay()))
			}
			// Not published: the runtime never makes hidden attempts; they
			// reach a pod only as a factor of leafAttempts.
			want.Layer.HiddenAttempts = nil
			if !equality.Semantic.DeepEqual(specOf(&got.Policy), want) {
				t.Errorf("the payload lost part of the policy:\n got %+v\nwant %+v", specOf(&got.Policy), want)
			}
			if got.Policy.Namespace != "auth" || got.Policy.Name != p.Name || got.Policy.Generation != 2 || got.Policy.LeafAttempts != 3 {
				t.Errorf("identity: %+v", got.Policy)
			}
			bs := budget.Spec.WithDefaults()
			if got.Budget == nil || got.Budget.Name != budget.Name || got.Budget.Generation != 4 ||
				got.Budget.RetryPercent != bs.RetryPercent || got.Budget.Window.D() != bs.Window.Duration() ||
				got.Budget.MaxTokens != *bs.MaxTokens || got.Budget.Partitions != *bs.Partitions {
				t.Errorf("budget %+v, want %+v", got.Budget, bs)
			}
		})
	}
}

// A NoRetry verdict must reach the pods even for a spec whose key template
// cannot render (one that escaped CEL): the payload carries no template
// rather than one that Parse refuses, so the pods do not keep an older,
// Enforced payload.
func TestNoRetryPayloadDropsATemplateThatCannotRender(t *testing.T) {
	p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	p.Namespace, p.Generation = "auth", 2
	p.Spec.Idempotency.KeyTemplate = ptr.To("SMS-{user_id")
	noRetry := policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: v1.ReasonInvalidSpec, Message: "bad template"}
	raw, err := policyconfig.Marshal(controllers.BuildPayload(p, nil, 3, noRetry))
	if err != nil {
		t.Fatalf("a NoRetry verdict could not be published: %v", err)
	}
	got, err := policyconfig.Parse(raw)
	if err != nil || got.Policy.KeyTemplate != "" || got.Enforcement.Mode != policyconfig.NoRetry {
		t.Fatalf("%+v %v", got, err)
	}
	// An Enforced payload keeps what the spec says, and Marshal refuses it.
	if _, err := policyconfig.Marshal(controllers.BuildPayload(p, nil, 3, policyconfig.Enforcement{Mode: policyconfig.Enforced})); err == nil {
		t.Fatal("an Enforced payload with a bad template was published")
	}
}

// A fleet budget's allowance always reaches the pods; its consumer count
// never does: a budget that selects consumers is published Counted, and the
// count is in the budget's own ConfigMap, so that a count change rewrites
// no payload.
func TestFleetBudgetPayload(t *testing.T) {
	p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	p.Namespace, p.Generation = "auth", 2
	budget := testenv.Sample[v1.RetryBudget](t, "policy_v1alpha1_retrybudget.yaml")
	budget.UID = "7d3c2a61-0b5e-4f7a-9c1d-2e8f6a4b5c90"
	enforced := policyconfig.Enforcement{Mode: policyconfig.Enforced}
	publish := func(b *v1.RetryBudget) *policyconfig.Budget {
		t.Helper()
		raw, err := policyconfig.Marshal(controllers.BuildPayload(p, b, 3, enforced))
		if err != nil {
			t.Fatal(err)
		}
		got, err := policyconfig.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return got.Budget
	}

	if b := publish(budget); b.MaxRetriesPerSecond != nil || b.Consumers != nil || b.Counted {
		t.Errorf("a budget without fleet figures: %+v", b)
	}
	budget.Spec.MaxRetriesPerSecond = ptr.To[int32](20)
	if b := publish(budget); b.MaxRetriesPerSecond == nil || *b.MaxRetriesPerSecond != 20 || b.Consumers != nil || b.Counted {
		t.Errorf("an allowance without consumers: %+v", b)
	}
	budget.Spec.MaxRetriesPerSecond = ptr.To[int32](0)
	if b := publish(budget); b.MaxRetriesPerSecond == nil || *b.MaxRetriesPerSecond != 0 {
		t.Errorf("an allowance of 0 (no retry) was lost: %+v", b)
	}
	budget.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sms"}}}
	if b := publish(budget); !b.Counted || b.Consumers != nil || b.UID != string(budget.UID) {
		t.Errorf("a budget with consumers: %+v, want Counted, its UID and no count", b)
	}
	// A selector that escaped validation is not Counted: the pods take
	// the conservative share, as the budget's status says.
	budget.Spec.Consumers.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
	if b := publish(budget); b.Counted || b.Consumers != nil {
		t.Errorf("an invalid selector: %+v", b)
	}
	// The payload does not alias the budget: publishing cannot edit it.
	payload := controllers.BuildPayload(p, budget, 3, enforced)
	*payload.Budget.MaxRetriesPerSecond = 99
	if *budget.Spec.MaxRetriesPerSecond != 0 {
		t.Error("the payload shares the budget's allowance")
	}
}

// A budget that escaped admission with an allowance out of range, or a
// floor above it, is published as written and refused by the pods, as
// admission would have refused it.
func TestFleetBudgetOutOfRangeIsRefusedByThePods(t *testing.T) {
	p := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	p.Namespace, p.Generation = "auth", 2
	for name, edit := range map[string]func(*v1.RetryBudgetSpec){
		"a negative allowance":       func(s *v1.RetryBudgetSpec) { s.MaxRetriesPerSecond = ptr.To[int32](-1) },
		"an allowance above the cap": func(s *v1.RetryBudgetSpec) { s.MaxRetriesPerSecond = ptr.To[int32](100001) },
		"a floor above the allowance": func(s *v1.RetryBudgetSpec) {
			s.MaxRetriesPerSecond, s.MinRetriesPerSecond = ptr.To[int32](2), ptr.To[int32](3)
		},
	} {
		t.Run(name, func(t *testing.T) {
			budget := testenv.Sample[v1.RetryBudget](t, "policy_v1alpha1_retrybudget.yaml")
			edit(&budget.Spec)
			if errs, err := crdvalidation.Validate(context.Background(), budget); err != nil || len(errs) == 0 {
				t.Fatalf("admission accepts it (%v)", err)
			}
			raw, err := json.Marshal(controllers.BuildPayload(p, budget, 3, policyconfig.Enforcement{Mode: policyconfig.Enforced}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := policyconfig.Parse(raw); err == nil {
				t.Fatalf("the pods accept it:\n%s", raw)
			}
		})
	}
}
