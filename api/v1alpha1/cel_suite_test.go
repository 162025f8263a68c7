package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/internal/testenv"
)

// The CEL suite sends objects through a real kube-apiserver with the
// generated CRDs installed, so the rules under test are the ones in
// config/crd/bases, not a Go imitation of them.

var (
	testEnv *envtest.Environment
	k8s     client.Client
	ctx     context.Context
)

func TestCEL(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CRD CEL rules")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = testenv.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cel"}})).To(Succeed())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// serverVerdict creates obj with dryRun=All and reduces the API server's
// answer to sorted "field code" lines, in the form verdict() gives Go errors.
func serverVerdict(obj client.Object) []string {
	obj.SetNamespace("cel")
	err := k8s.Create(ctx, obj, client.DryRunAll)
	if err == nil {
		return []string{}
	}
	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue(), "not an API status: %v", err)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected Invalid, got %v", err)
	out := []string{}
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field+" "+codeOf(c.Message))
	}
	slices.Sort(out)
	return out
}

var _ = Describe("RetryPolicy: the API server gives the admission table's verdicts", func() {
	for _, tc := range policyCases {
		It(tc.Name, func() {
			p := policyFor(GinkgoTB(), tc)
			p.Name = "parity"
			got := serverVerdict(p)
			Expect(got).To(Equal(sorted(tc.Want)))
		})
	}
})

var _ = Describe("RetryBudget: the API server gives the admission table's verdicts", func() {
	for _, tc := range budgetCases {
		It(tc.Name, func() {
			b := budgetFor(GinkgoTB(), tc)
			b.Name = "parity"
			Expect(serverVerdict(b)).To(Equal(sorted(tc.Want)))
		})
	}
})

// The offline evaluation (crdvalidation, which kubectl retryguard lint and
// the controllers use) is the API server's own code: on every case of the
// table it gives the server's causes word for word.
var _ = Describe("Offline, the CRDs give the API server's answer", func() {
	causes := func(obj client.Object) []string {
		obj.SetNamespace("cel")
		out := []string{}
		var status apierrors.APIStatus
		if err := k8s.Create(ctx, obj, client.DryRunAll); errors.As(err, &status) && status.Status().Details != nil {
			for _, c := range status.Status().Details.Causes {
				out = append(out, c.Field+": "+c.Message)
			}
		}
		slices.Sort(out)
		return out
	}
	offline := func(obj client.Object) []string {
		errs, err := crdvalidation.Validate(ctx, obj)
		Expect(err).NotTo(HaveOccurred())
		out := []string{}
		for _, e := range errs {
			out = append(out, e.Field+": "+e.ErrorBody())
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range policyCases {
		It("policy: "+tc.Name, func() {
			p := policyFor(GinkgoTB(), tc)
			p.Name = "offline"
			Expect(offline(p.DeepCopy())).To(Equal(causes(p)))
		})
	}
	for _, tc := range budgetCases {
		It("budget: "+tc.Name, func() {
			b := budgetFor(GinkgoTB(), tc)
			b.Name = "offline"
			Expect(offline(b.DeepCopy())).To(Equal(causes(b)))
		})
	}
})

var _ = Describe("Rejections a user reads", func() {
	It("names the field, the rule and the code", func() {
		p := policyFor(GinkgoTB(), policyCase{Mutate: func(s *v1.RetryPolicySpec) { s.MaxAttempts = limits.MaxAttemptsCeiling + 1 }})
		p.Name, p.Namespace = "too-many", "cel"
		err := k8s.Create(ctx, p)
		Expect(err).To(MatchError(And(
			ContainSubstring("spec.maxAttempts"),
			ContainSubstring("ERR_RETRY_LIMIT_EXCEEDED"),
			ContainSubstring(fmt.Sprintf("between 1 and %d", limits.MaxAttemptsCeiling)),
		)))
	})

	It("rejects a duration that does not parse with one coded error", func() {
		p := policyFor(GinkgoTB(), policyCase{Mutate: func(*v1.RetryPolicySpec) {}})
		u, err := toUnstructured(p)
		Expect(err).NotTo(HaveOccurred())
		Expect(u.SetNestedField("soon", "spec", "deadline")).To(Succeed())
		u.SetNamespace("cel")
		err = k8s.Create(ctx, u.Unstructured, client.DryRunAll)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		// One answer, naming the field and the code; no CEL evaluation noise
		// from the rules that compare the deadline.
		Expect(err).To(MatchError(ContainSubstring(`spec.deadline: Invalid value: "soon": ERR_INVALID_DURATION`)))
		var status apierrors.APIStatus
		Expect(errors.As(err, &status)).To(BeTrue())
		Expect(status.Status().Details.Causes).To(HaveLen(1), "%v", err)
		Expect(err.Error()).NotTo(ContainSubstring("type conversion"))

		b := &v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cel"}, Spec: v1.RetryBudgetSpec{RetryPercent: 10}}
		ub, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
		Expect(err).NotTo(HaveOccurred())
		Expect(unstructured.SetNestedField(ub, "a minute", "spec", "window")).To(Succeed())
		bu := &unstructured.Unstructured{Object: ub}
		bu.SetAPIVersion("policy.retryguard.io/v1alpha1")
		bu.SetKind("RetryBudget")
		err = k8s.Create(ctx, bu, client.DryRunAll)
		Expect(err).To(MatchError(ContainSubstring(`spec.window: Invalid value: "a minute": ERR_INVALID_DURATION`)))
		Expect(err.Error()).NotTo(ContainSubstring("type conversion"))
	})
})

var _ = Describe("Samples", func() {
	It("are all accepted, and read back with every default visible", func() {
		for _, f := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml"} {
			b := testenv.Sample[v1.RetryBudget](GinkgoTB(), f)
			b.Namespace = "cel"
			Expect(k8s.Create(ctx, b)).To(Succeed(), f)
		}
		for _, f := range []string{"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
			p := testenv.Sample[v1.RetryPolicy](GinkgoTB(), f)
			p.Namespace = "cel"
			Expect(k8s.Create(ctx, p)).To(Succeed(), f)
		}

		var mkt v1.RetryPolicy
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "cel", Name: "marketing-campaign-notify"}, &mkt)).To(Succeed())
		Expect(mkt.Spec.Backoff.Multiplier).To(HaveValue(BeEquivalentTo(2)))
		Expect(mkt.Spec.MinRemaining.Duration().String()).To(Equal("500ms"))
		// retryAfter.maxDelay has no CRD default: it is derived from the deadline.
		Expect(mkt.Spec.RetryAfter).To(HaveValue(HaveField("MaxDelay", BeNil())))
		Expect(mkt.Spec.RetryAfterMaxDelay().String()).To(Equal("3s"))
		Expect(mkt.Spec.RetryOn.StatusCodes).To(Equal([]int32{429, 503, 504}))
		Expect(mkt.Spec.RetryOn.Errors).To(Equal([]v1.TransportError{v1.ConnectionRefused, v1.DNSFailure}))
		Expect(mkt.Spec.Idempotency.Header).To(HaveValue(Equal("Idempotency-Key")))
	})

	It("default exactly as WithDefaults does, for a minimal policy and budget", func() {
		minimal := &v1.RetryPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: "cel"},
			Spec: v1.RetryPolicySpec{
				Target:      v1.RetryTarget{Service: "ledger"},
				Layer:       v1.RetryLayer{Name: "connector"},
				MaxAttempts: 1,
				Deadline:    *dur("2s"),
			},
		}
		want := minimal.Spec.WithDefaults()
		Expect(k8s.Create(ctx, minimal)).To(Succeed())
		Expect(minimal.Spec.Backoff.Jitter).To(HaveValue(Equal(v1.JitterFull)))
		Expect(minimal.Spec.Backoff.Base.Duration().String()).To(Equal("100ms"))
		Expect(minimal.Spec.Backoff.Cap.Duration().String()).To(Equal("3s"))
		Expect(minimal.Spec.MinRemaining.Duration().String()).To(Equal("500ms"))
		Expect(minimal.Spec.Criticality).To(HaveValue(Equal(v1.CriticalityStandard)))
		Expect(minimal.Spec).To(Equal(want), "API server defaults and WithDefaults differ")

		budget := &v1.RetryBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: "cel"},
			Spec:       v1.RetryBudgetSpec{RetryPercent: 10},
		}
		wantBudget := budget.Spec.WithDefaults()
		Expect(k8s.Create(ctx, budget)).To(Succeed())
		Expect(budget.Spec.Window.Duration().String()).To(Equal("1m0s"))
		Expect(budget.Spec.MaxTokens).To(HaveValue(BeEquivalentTo(10)))
		Expect(budget.Spec.Partitions).To(HaveValue(BeEquivalentTo(1)))
		Expect(budget.Spec).To(Equal(wantBudget), "API server defaults and WithDefaults differ")
	})

	It("print the documented columns", func() {
		crd := fmt.Sprintf("retrypolicies.%s", v1.GroupVersion.Group)
		cols := printerColumns(crd)
		Expect(cols).To(Equal([]string{"Service", "Layer", "Attempts", "Leaf", "Budget", "Ready", "Reason", "WorstCase (wide)", "Age"}))
		Expect(printerColumns("retrybudgets." + v1.GroupVersion.Group)).To(Equal([]string{
			"Percent", "Window", "Policies", "Consumers", "Ready", "Reason", "Partitions (wide)", "MaxRetries/s (wide)", "Age"}))
	})
})

// Every default is valid: an object read back with every default the API
// server applies passes every CEL rule, sent again whole and evaluated
// offline (crdvalidation), for the minimal policy, for a retrying policy
// with no backoff, and for the minimal budget.
var _ = Describe("Every default", func() {
	minimal := func(name string, change func(*v1.RetryPolicySpec)) *v1.RetryPolicy {
		p := &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cel"}, Spec: v1.RetryPolicySpec{
			Target: v1.RetryTarget{Service: "ledger"}, Layer: v1.RetryLayer{Name: "connector"},
			MaxAttempts: 1, Deadline: *dur("2s")}}
		change(&p.Spec)
		return p
	}
	for name, p := range map[string]*v1.RetryPolicy{
		"of the minimal policy is valid": minimal("defaults-minimal", func(*v1.RetryPolicySpec) {}),
		"of a retrying policy without backoff is valid": minimal("defaults-retrying", func(s *v1.RetryPolicySpec) {
			s.MaxAttempts = 3
			s.BudgetRef = &v1.BudgetReference{Name: "ledger"}
			s.Target.Operation = ptr.To("GET /v1/balance")
		}),
	} {
		It(name, func() {
			Expect(k8s.Create(ctx, p)).To(Succeed())
			defaulted := p.DeepCopy()
			Expect(defaulted.Spec).To(Equal(p.Spec.WithDefaults()))
			Expect(defaulted.Spec.Backoff).To(Equal(&v1.Backoff{Jitter: ptr.To(v1.JitterFull), Base: dur("100ms"), Cap: dur("3s"),
				Multiplier: ptr.To[int32](2)}))
			Expect(crdvalidation.Validate(ctx, defaulted)).To(BeEmpty())
			again := &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-again"}, Spec: defaulted.Spec}
			Expect(serverVerdict(again)).To(BeEmpty())
		})
	}
	It("of the minimal budget is valid", func() {
		b := &v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Name: "defaults-minimal", Namespace: "cel"}, Spec: v1.RetryBudgetSpec{RetryPercent: 10}}
		Expect(k8s.Create(ctx, b)).To(Succeed())
		Expect(crdvalidation.Validate(ctx, b)).To(BeEmpty())
		Expect(serverVerdict(&v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Name: "defaults-minimal-again"}, Spec: b.Spec})).To(BeEmpty())
	})
})
