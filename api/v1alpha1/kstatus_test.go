package v1alpha1_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// No controller runs in this suite, so every object stays as the API server
// stored it: never observed. GitOps tools read it with kstatus, and an
// object no controller has observed must not read as Current (a manager
// that is down would otherwise look healthy): its status defaults to
// observedGeneration 0, below metadata.generation.
var _ = Describe("kstatus, before the controller observes an object", func() {
	// computed reads obj as GitOps tools do, unstructured: a typed read
	// would drop observedGeneration 0 (omitempty).
	computed := func(obj client.Object, kind string) *status.Result {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), u)).To(Succeed())
		res, err := status.Compute(u)
		Expect(err).NotTo(HaveOccurred())
		return res
	}
	It("reads a new RetryPolicy as InProgress", func() {
		p := &v1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "kstatus-new", Namespace: "cel"}, Spec: v1.RetryPolicySpec{
			Target: v1.RetryTarget{Service: "ledger"}, Layer: v1.RetryLayer{Name: "connector"}, MaxAttempts: 1, Deadline: *dur("2s")}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		res := computed(p, "RetryPolicy")
		Expect(res.Status).To(Equal(status.InProgressStatus), res.Message)
	})
	It("reads a new RetryBudget as InProgress", func() {
		b := &v1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Name: "kstatus-new", Namespace: "cel"}, Spec: v1.RetryBudgetSpec{RetryPercent: 10}}
		Expect(k8s.Create(ctx, b)).To(Succeed())
		res := computed(b, "RetryBudget")
		Expect(res.Status).To(Equal(status.InProgressStatus), res.Message)
	})
})
