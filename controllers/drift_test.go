package controllers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
)

// forgeHash sets the hash annotation to match whatever the payload now is,
// as an attacker who read the format would.
func forgeHash(cm *corev1.ConfigMap) {
	sum := sha256.Sum256([]byte(cm.Data[policyconfig.DataKey]))
	cm.Annotations[policyconfig.ContentHashAnnotation] = hex.EncodeToString(sum[:])
}

var _ = Describe("Drift", func() {
	It("is repaired even when the hash annotation is forged to match", func() {
		ns, p := publishedConnector("forged")

		// A valid payload that says one attempt, with a hash that matches it.
		payload, cm := payloadOf(Default, ns, p.Name)
		payload.Policy.MaxAttempts = 1
		raw, err := policyconfig.Marshal(payload)
		Expect(err).NotTo(HaveOccurred())
		edit(cm, func(cm *corev1.ConfigMap) {
			cm.Data[policyconfig.DataKey] = string(raw)
			forgeHash(cm)
		})
		Eventually(func(g Gomega) {
			got, _ := payloadOf(g, ns, p.Name)
			g.Expect(got.Policy.MaxAttempts).To(BeEquivalentTo(3))
		}).Should(Succeed())
	})

	It("finds and repairs a ConfigMap whose managed-by label was removed, and the policy ends Published", func() {
		ns, p := publishedConnector("unlabelled")
		_, cm := payloadOf(Default, ns, p.Name)
		edit(cm, func(cm *corev1.ConfigMap) {
			delete(cm.Labels, policyconfig.ManagedByLabel)
			cm.Data[policyconfig.DataKey] = `{"schemaVersion":"forged"}`
			forgeHash(cm)
		})
		Eventually(func(g Gomega) {
			payload, cm := payloadOf(g, ns, p.Name)
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ManagedByLabel, policyconfig.ManagedByValue))
			g.Expect(payload.Policy.Name).To(Equal(p.Name))
			c, _ := readyOf(g, ns, p.Name)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1.ReasonPublished))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			c, _ := readyOf(g, ns, p.Name)
			g.Expect(c.Reason).To(Equal(v1.ReasonPublished))
		}, time.Second).Should(Succeed())
	})

	It("writes with server-side apply under its field owner", func() {
		ns, p := publishedConnector("applied")
		_, cm := payloadOf(Default, ns, p.Name)
		Expect(cm.ManagedFields).To(ContainElement(And(
			HaveField("Manager", controllers.FieldOwner),
			HaveField("Operation", metav1.ManagedFieldsOperationApply))))
		Expect(cm.ManagedFields).NotTo(ContainElement(HaveField("Operation", metav1.ManagedFieldsOperationUpdate)),
			"a field was written by a plain update")
	})

	It("resyncs every policy periodically, as configured", func() {
		ns, p := publishedConnector("resynced")
		r := &controllers.RetryPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("test"), Limits: policygraph.DefaultLimits(), ResyncPeriod: 7 * time.Minute}
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: p.Name}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(7 * time.Minute))

		r.ResyncPeriod = 0
		res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: p.Name}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(controllers.DefaultResyncPeriod))
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.ConfigMapName(p.Name)}, &cm)).To(Succeed())
	})
})
