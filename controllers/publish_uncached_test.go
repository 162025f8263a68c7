package controllers_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
)

// A ConfigMap the label-filtered cache
// does not hold is applied without a read. Each case must end in a
// published payload (or a clear failure) and then in no further write: a
// reconcile that finds nothing drifted must leave resourceVersion alone.
var _ = Describe("publishing a ConfigMap the cache does not hold", func() {
	reconcileTwice := func(ns, name string) {
		GinkgoHelper()
		r := &controllers.RetryPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("probe"), Limits: policygraph.DefaultLimits()}
		for range 2 {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
			Expect(err).NotTo(HaveOccurred())
		}
	}
	rv := func(ns, name string) string {
		GinkgoHelper()
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.ConfigMapName(name)}, &cm)).To(Succeed())
		return cm.ResourceVersion
	}
	// writesNoMore waits until the manager's cache holds the policy's
	// ConfigMap, then holds that two reconciles and two seconds of the
	// running controller leave its resourceVersion alone.
	writesNoMore := func(ns, name string) {
		GinkgoHelper()
		key := client.ObjectKey{Namespace: ns, Name: policyconfig.ConfigMapName(name)}
		Eventually(func() error { return mgr.GetClient().Get(ctx, key, &corev1.ConfigMap{}) }).Should(Succeed())
		before := rv(ns, name)
		reconcileTwice(ns, name)
		Consistently(func() string { return rv(ns, name) }, 2*time.Second).Should(Equal(before), "a write loop")
	}

	It("takes over a user's unlabelled ConfigMap of the same name with foreign data, then stops writing", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policyconfig.ConfigMapName("squat")},
			Data: map[string]string{"foreign": "x", policyconfig.DataKey: `{"schemaVersion":"forged"}`}})).To(Succeed())
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		p := fixtures.Policy(ns, "squat", "connector", 3)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReason(ns, p.Name, v1.ReasonPublished)
		payload, cm := payloadOf(Default, ns, p.Name)
		Expect(payload.Policy.Name).To(Equal(p.Name))
		Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ManagedByLabel, policyconfig.ManagedByValue))
		GinkgoWriter.Printf("foreign key after takeover: %q\n", cm.Data["foreign"])
		writesNoMore(ns, p.Name)
	})

	It("after a label removal and repair, writes no more", func() {
		ns, p := publishedConnector("relabel")
		_, cm := payloadOf(Default, ns, p.Name)
		edit(cm, func(cm *corev1.ConfigMap) { delete(cm.Labels, policyconfig.ManagedByLabel) })
		Eventually(func(g Gomega) {
			_, cm := payloadOf(g, ns, p.Name)
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ManagedByLabel, policyconfig.ManagedByValue))
		}).Should(Succeed())
		writesNoMore(ns, p.Name)
	})

	It("refuses to publish over a ConfigMap another controller controls, says so, and changes nothing of it", func() {
		ns := newNamespace()
		other := metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: ns, UID: "11111111-2222-3333-4444-555555555555",
			Controller: ptr.To(true)}
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policyconfig.ConfigMapName("owned"),
			OwnerReferences: []metav1.OwnerReference{other}}, Data: map[string]string{"foreign": "x"}})).To(Succeed())
		before := rv(ns, "owned")
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		p := fixtures.Policy(ns, "owned", "connector", 3)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			c, _ := readyOf(g, ns, p.Name)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1.ReasonPublishFailed))
			GinkgoWriter.Printf("condition: %s\n", c.Message)
		}).Should(Succeed())
		Expect(rv(ns, "owned")).To(Equal(before), "the foreign-controlled ConfigMap was changed")
	})
})

// The RetryBudget's count ConfigMap takes
// the same path (publishCount): one whose managed-by label was removed
// leaves the cache and must be relabelled by the apply alone.
var _ = Describe("the budget's count ConfigMap", func() {
	It("is relabelled after its managed-by label was removed", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fleetBudget(ns, "checkout", "checkout", 5))).To(Succeed())
		createPods(ns, "checkout", "c1")
		expectPublishedCount(ns, "checkout", 1)
		_, cm := countOf(Default, ns, "checkout")
		edit(cm, func(cm *corev1.ConfigMap) { delete(cm.Labels, policyconfig.ManagedByLabel) })
		Eventually(func(g Gomega) {
			_, cm := countOf(g, ns, "checkout")
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ManagedByLabel, policyconfig.ManagedByValue))
		}).Should(Succeed())
	})
})
