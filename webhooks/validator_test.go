package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/webhooks"
)

// fakeReader is an indexed fake client holding stored policies, standing in
// for the manager's cache.
func fakeReader(stored ...*v1.RetryPolicy) client.WithWatch {
	b := fake.NewClientBuilder().WithScheme(testenv.Scheme())
	for field, fn := range policyindex.IndexFuncs() {
		b = b.WithIndex(&v1.RetryPolicy{}, field, fn)
	}
	for _, p := range stored {
		b = b.WithObjects(p)
	}
	return b.Build()
}

func validator(stored ...*v1.RetryPolicy) *webhooks.RetryPolicyValidator {
	return &webhooks.RetryPolicyValidator{Reader: fakeReader(stored...), Limits: policygraph.DefaultLimits()}
}

// The single-object rules are the CRD's, which the API server checks before
// it calls the webhook: the webhook does not restate them (a single
// attempt with jitter None and no budget passes it), and keeps the one CEL
// cannot state, a label selector that parses.
func TestRetryPolicyValidatorJudgesWhatTheCRDCannot(t *testing.T) {
	p := policyIn("ns", "lockstep", "connector", 1)
	p.Spec.Backoff.Jitter = ptr.To(v1.JitterNone)
	p.Spec.BudgetRef = nil
	if _, err := validator().ValidateCreate(context.Background(), p); err != nil {
		t.Fatalf("the webhook restates a CRD rule: %v", err)
	}
	p.Spec.Layer.AllowedChildren = &v1.AllowedChildren{Namespaces: &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromSelector),
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}}}
	_, err := validator().ValidateCreate(context.Background(), p)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want Invalid, got %v", err)
	}
	for _, want := range []string{"spec.layer.allowedChildren.namespaces.selector", "ERR_INVALID_SELECTOR", "not a valid label selector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %s", err, want)
		}
	}
}

// A hedge is an attempt, so the webhook counts it in the layer product
// across namespaces; the hedging rules of one object are the CRD's, which
// the webhook does not restate (a hedging keyless POST passes it).
func TestRetryPolicyValidatorCountsHedges(t *testing.T) {
	keyless := policyIn("ns", "connector", "connector", 2, fixtures.Hedge(50*time.Millisecond, 1))
	keyless.Spec.Idempotency = nil
	keyless.Spec.RetryOn = &v1.RetryOn{StatusCodes: []int32{}, Errors: []v1.TransportError{v1.ConnectionRefused}}
	if _, err := validator().ValidateCreate(context.Background(), keyless); err != nil {
		t.Fatalf("the webhook restates the CRD's hedging rule: %v", err)
	}
	job := policyIn("jobs", "job", "job", 3, fixtures.Allowing(v1.NamespacesFromAll, nil))
	child := policyIn("ns", "connector", "connector", 2, fixtures.ParentIn("jobs", "job"), fixtures.Hedge(50*time.Millisecond, 1))
	_, err := validator(job).ValidateCreate(context.Background(), child)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ERR_LAYER_AMPLIFICATION") || !strings.Contains(err.Error(), "connector(2) = 6 > 3") {
		t.Fatalf("a hedge over the layer product: want ERR_LAYER_AMPLIFICATION, got %v", err)
	}
}

func TestRetryPolicyValidatorUpdateSeesTheNewObject(t *testing.T) {
	job := policyIn("ns", "job", "job", 1)
	child := policyIn("ns", "connector", "connector", 3, parent("job"))
	v := validator(job, child)
	raised := job.DeepCopy()
	raised.Spec.MaxAttempts = 3
	if _, err := v.ValidateUpdate(context.Background(), job, raised); err == nil || !strings.Contains(err.Error(), "job(3) × connector(3) = 9 > 3") {
		t.Fatalf("raising job over its child: %v", err)
	}
	if w, err := v.ValidateUpdate(context.Background(), job, job); err != nil || len(w) > 0 {
		t.Fatalf("a no-op update: %v %v", w, err)
	}
	if _, err := v.ValidateDelete(context.Background(), job); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

// A cache that cannot answer is an internal error, never an admission.
func TestRetryPolicyValidatorFailsClosedOnLookupErrors(t *testing.T) {
	broken := interceptor.NewClient(fakeReader(), interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache unavailable")
		},
	})
	v := &webhooks.RetryPolicyValidator{Reader: broken, Limits: policygraph.DefaultLimits()}
	_, err := v.ValidateCreate(context.Background(), policyIn("ns", "p", "connector", 1))
	if !apierrors.IsInternalError(err) {
		t.Fatalf("want InternalError, got %v", err)
	}
}

func TestRetryBudgetValidator(t *testing.T) {
	v := &webhooks.RetryBudgetValidator{Limits: policygraph.DefaultLimits()}
	if _, err := v.ValidateCreate(context.Background(), budgetIn("ns", "ok", 10)); err != nil {
		t.Fatal(err)
	}
	// The ranges are the CRD's; the platform cap and the selector are the webhook's.
	b := budgetIn("ns", "bad", 25)
	b.Spec.Window = ptr.To(v1.DurationOf(time.Millisecond))
	b.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a b"}}}
	_, err := v.ValidateCreate(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "spec.retryPercent") || !strings.Contains(err.Error(), "ERR_BUDGET_ABOVE_PLATFORM_CAP") ||
		!strings.Contains(err.Error(), "spec.consumers.podSelector") || strings.Contains(err.Error(), "spec.window") {
		t.Fatalf("want the cap and the selector, not the window's range, got %v", err)
	}
}

// FuzzValidateRetryPolicy sends random specs through the admission
// validator against a cache holding a small call tree, with parents in
// another namespace that consent (All) and that do not (Same). It must
// never panic, an admitted policy never makes a chain above the limit, and
// an admitted policy never names a parent that does not allow it.
func FuzzValidateRetryPolicy(f *testing.F) {
	stored := []*v1.RetryPolicy{
		policyIn("ns", "workflow", "workflow", 1),
		policyIn("ns", "job", "job", 3, parent("workflow"), onPool("pool-a"), critical),
		policyIn("ns", "connector", "connector", 1, parent("job")),
		policyIn("ns", "loop-a", "a", 1, parent("loop-b")),
		policyIn("ns", "loop-b", "b", 1, parent("loop-a")),
		policyIn("gw", "open", "gateway", 1, allowing(v1.NamespacesFromAll, nil)),
		policyIn("gw", "closed", "gateway", 3),
		policyIn("gw", "job", "job", 3, parent("open"), allowing(v1.NamespacesFromAll, nil)),
	}
	v := validator(stored...)
	lookup := policyindex.CacheLookup{Reader: v.Reader}
	for _, p := range stored {
		raw, _ := json.Marshal(p.Spec)
		f.Add("new", raw)
		f.Add(p.Name, raw)
	}
	f.Add("job", []byte(`{"maxAttempts":3,"layer":{"name":"x","parentRef":{"name":"connector"}}}`))
	f.Add("new", []byte(`{"maxAttempts":1,"layer":{"name":"x","parentRef":{"name":"closed","namespace":"gw"}}}`))
	f.Add("new", []byte(`{"maxAttempts":3,"layer":{"name":"x","parentRef":{"name":"job","namespace":"gw"}}}`))
	f.Fuzz(func(t *testing.T, name string, raw []byte) {
		var spec v1.RetryPolicySpec
		if name == "" || json.Unmarshal(raw, &spec) != nil {
			return
		}
		p := &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: spec}
		if _, err := v.ValidateCreate(context.Background(), p); err != nil {
			return
		}
		a, err := policygraph.Analyze(context.Background(), lookup, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Cycle) > 0 || a.Worst().Product() > policygraph.DefaultMaxLeafAttempts {
			t.Fatalf("admitted %s with chain %s, cycle %v", name, a.Worst(), a.Cycle)
		}
		if key, ok := policygraph.ParentKey(p); ok {
			if parent, _ := lookup.Get(context.Background(), key); parent != nil && !policygraph.ChildPermitted(parent, p.Namespace, nil) {
				t.Fatalf("admitted %s under %s, which does not allow namespace %s", name, key, p.Namespace)
			}
		}
	})
}
