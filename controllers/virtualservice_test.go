package controllers_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
)

// The manager starts without Istio; the Ordered container first checks the
// controller without Istio's CRD, then installs a minimal VirtualService
// CRD, as a cluster does when Istio is installed after the operator.
var _ = Describe("Hidden layers", Ordered, ContinueOnFailure, func() {
	// expectHidden waits until a policy reports these hidden layers and leaf
	// attempts, in status and in its payload.
	expectHidden := func(ns, name string, leaf int32, hidden ...v1.HiddenLayer) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			_, p := readyOf(g, ns, name)
			g.Expect(p.Status.HiddenLayers).To(Equal(hidden))
			g.Expect(p.Status.LeafAttempts).To(Equal(leaf))
			payload, _ := payloadOf(g, ns, name)
			g.Expect(payload.Policy.LeafAttempts).To(Equal(leaf))
		}).Should(Succeed())
	}
	virtualService := func(ns, name, doc string) *unstructured.Unstructured {
		GinkgoHelper()
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		u.SetAPIVersion(controllers.IstioNetworkingGroup + "/v1")
		u.SetKind(controllers.VirtualServiceKind)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	istio := func(name string, attempts int32) v1.HiddenLayer {
		return v1.HiddenLayer{Source: controllers.VirtualServiceSourcePrefix + name, Attempts: attempts}
	}

	It("without Istio's CRD, reports spec.layer.hiddenAttempts and reads no VirtualService", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
		p := fixtures.Policy(ns, "sdk", "connector", 1, fixtures.Hidden(3))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReason(ns, p.Name, v1.ReasonPublished)
		expectHidden(ns, p.Name, 3, v1.HiddenLayer{Source: policygraph.HiddenAttemptsSource, Attempts: 3})

		var crds metav1.PartialObjectMetadataList
		crds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"})
		Expect(mgr.GetCache().List(ctx, &crds)).To(Succeed())
		Expect(crds.Items).To(BeEmpty(), "the manager watches Istio's CRD only, and it is not installed")
	})

	Context("once Istio's CRD is installed", func() {
		BeforeAll(func() {
			_, err := envtest.InstallCRDs(testEnv.Config, envtest.CRDInstallOptions{
				Paths: []string{"testdata/virtualservice-crd.yaml"}, ErrorIfPathMissing: true})
			Expect(err).NotTo(HaveOccurred())
		})

		It("counts a VirtualService that routes the policy's service", func() {
			ns := newNamespace()
			Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
			p := fixtures.Policy(ns, "payments", "connector", 3, fixtures.Service("payments"))
			Expect(k8s.Create(ctx, p)).To(Succeed())
			expectReason(ns, p.Name, v1.ReasonPublished)
			expectHidden(ns, p.Name, 3)

			By("a VirtualService routing another service changes nothing")
			// The ledger policy is the witness that the controller has read
			// the VirtualService: it sees its hidden layer.
			ledger := fixtures.Policy(ns, "ledger", "connector", 1, fixtures.Service("ledger"), fixtures.BudgetRef("ledger"))
			Expect(k8s.Create(ctx, fixtures.Budget(ns, "ledger", 10))).To(Succeed())
			Expect(k8s.Create(ctx, ledger)).To(Succeed())
			other := virtualService(ns, "ledger", `spec: {hosts: [ledger], http: [{route: [{destination: {host: ledger}}]}]}`)
			Expect(k8s.Create(ctx, other)).To(Succeed())
			expectHidden(ns, ledger.Name, 3, istio("ledger", 3))
			expectReason(ns, p.Name, v1.ReasonPublished)
			expectHidden(ns, p.Name, 3)

			By("retries unset: Istio's default of 2 retries makes 3 × 3 = 9 > 3")
			vs := virtualService(ns, "x", `spec: {hosts: [payments.`+ns+`.svc.cluster.local], http: [{route: [{destination: {host: payments}}]}]}`)
			Expect(k8s.Create(ctx, vs)).To(Succeed())
			expectReason(ns, p.Name, v1.ReasonAmplificationExceeded)
			expectHidden(ns, p.Name, 9, istio("x", 3))
			c, _ := readyOf(Default, ns, p.Name)
			Expect(c.Message).To(And(ContainSubstring("connector(3×3 hidden) = 9 > 3"), ContainSubstring("VirtualService/x makes 3 attempts")))
			payload, _ := payloadOf(Default, ns, p.Name)
			Expect(payload.Enforcement.Mode).To(Equal(policyconfig.NoRetry))
			Expect(payload.Enforcement.Message).To(ContainSubstring("VirtualService/x"))

			By("retries.attempts 0 turns Istio's retries off")
			edit(vs, func(u *unstructured.Unstructured) {
				Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"retries": map[string]any{"attempts": int64(0)}}}, "spec", "http")).To(Succeed())
			})
			expectReason(ns, p.Name, v1.ReasonPublished)
			expectHidden(ns, p.Name, 3)

			By("more retries again, then the VirtualService deleted")
			edit(vs, func(u *unstructured.Unstructured) {
				Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"retries": map[string]any{"attempts": int64(4)}}}, "spec", "http")).To(Succeed())
			})
			expectReason(ns, p.Name, v1.ReasonAmplificationExceeded)
			expectHidden(ns, p.Name, 15, istio("x", 5))
			Expect(k8s.Delete(ctx, vs)).To(Succeed())
			expectReason(ns, p.Name, v1.ReasonPublished)
			expectHidden(ns, p.Name, 3)
		})

		It("multiplies a VirtualService of a parent's service into its children, with the policy's own hidden attempts", func() {
			ns := newNamespace()
			Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
			job := fixtures.Policy(ns, "job", "job", 1, fixtures.Service("jobs"))
			child := fixtures.Policy(ns, "connector", "connector", 1, fixtures.Parent("job"), fixtures.Hidden(2))
			Expect(k8s.Create(ctx, job)).To(Succeed())
			Expect(k8s.Create(ctx, child)).To(Succeed())
			expectHidden(ns, child.Name, 2, v1.HiddenLayer{Source: policygraph.HiddenAttemptsSource, Attempts: 2})

			vs := virtualService(ns, "jobs", `spec: {hosts: [jobs], http: [{retries: {attempts: 1}}]}`)
			Expect(k8s.Create(ctx, vs)).To(Succeed())
			expectHidden(ns, job.Name, 2, istio("jobs", 2))
			// The child's own layers are its hiddenAttempts only; its product
			// carries the parent's VirtualService: 1×2 × 1×2 = 4 > 3.
			expectHidden(ns, child.Name, 4, v1.HiddenLayer{Source: policygraph.HiddenAttemptsSource, Attempts: 2})
			expectReason(ns, child.Name, v1.ReasonAmplificationExceeded)
			// The child's hidden attempts are charged to the child: the
			// parent's own chain is job(1×2 hidden) × connector(1) = 2.
			expectReason(ns, job.Name, v1.ReasonPublished)
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, vs))).To(Succeed())
			expectReason(ns, child.Name, v1.ReasonPublished)
		})

		// The finding: a user of team-a adds a routing-only VirtualService (Istio's
		// default retries) for team-a's connector, a child of team-b's
		// workflow. The excess is team-a's: its connector turns not Ready
		// and NoRetry; team-b's workflow keeps its retries.
		It("charges a child's VirtualService to the child, never to its parent in another namespace", func() {
			teamB, teamA := newNamespace(), newNamespace()
			for _, ns := range []string{teamA, teamB} {
				Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
			}
			workflow := fixtures.Policy(teamB, "workflow", "workflow", 3, fixtures.Service("workflow"),
				fixtures.Allowing(v1.NamespacesFromAll, nil))
			connector := fixtures.Policy(teamA, "connector", "connector", 1, fixtures.ParentIn(teamB, "workflow"), fixtures.Service("connector"))
			Expect(k8s.Create(ctx, workflow)).To(Succeed())
			Expect(k8s.Create(ctx, connector)).To(Succeed())
			expectReason(teamB, workflow.Name, v1.ReasonPublished)
			expectReason(teamA, connector.Name, v1.ReasonPublished)

			Expect(k8s.Create(ctx, virtualService(teamA, "routing", `spec: {hosts: [connector], http: [{route: [{destination: {host: connector}}]}]}`))).To(Succeed())
			expectReason(teamA, connector.Name, v1.ReasonAmplificationExceeded)
			expectHidden(teamA, connector.Name, 9, istio("routing", 3))
			c, _ := readyOf(Default, teamA, connector.Name)
			Expect(c.Message).To(ContainSubstring(teamA + "/connector(1×3 hidden) = 9 > 3"))
			// A new generation of the parent is judged with the child's
			// VirtualService in the cache: still Published and Enforced.
			edit(workflow, func(p *v1.RetryPolicy) { p.Spec.Target.Operation = ptr.To("POST /v2/workflows") })
			expectReason(teamB, workflow.Name, v1.ReasonPublished)
			payload, _ := payloadOf(Default, teamB, workflow.Name)
			Expect(payload.Enforcement.Mode).To(Equal(policyconfig.Enforced))
		})

		It("counts a VirtualService of another namespace that routes the policy's service by FQDN, as exported", func() {
			teamA, teamB := newNamespace(), newNamespace()
			Expect(k8s.Create(ctx, fixtures.Budget(teamA, fixtures.DefaultBudget, 10))).To(Succeed())
			p := fixtures.Policy(teamA, "svc", "connector", 1, fixtures.Service("svc"))
			Expect(k8s.Create(ctx, p)).To(Succeed())
			expectReason(teamA, p.Name, v1.ReasonPublished)

			fqdn := "svc." + teamA + ".svc.cluster.local"
			vs := virtualService(teamB, "x", `spec: {hosts: [`+fqdn+`], http: [{retries: {attempts: 5}}]}`)
			Expect(k8s.Create(ctx, vs)).To(Succeed())
			expectHidden(teamA, p.Name, 6, v1.HiddenLayer{Source: controllers.VirtualServiceSourcePrefix + teamB + "/x", Attempts: 6})
			expectReason(teamA, p.Name, v1.ReasonAmplificationExceeded)

			By("exported to its own namespace only, it no longer applies to team-a's sidecars")
			edit(vs, func(u *unstructured.Unstructured) {
				Expect(unstructured.SetNestedStringSlice(u.Object, []string{"."}, "spec", "exportTo")).To(Succeed())
			})
			expectReason(teamA, p.Name, v1.ReasonPublished)
			expectHidden(teamA, p.Name, 1)
		})

		It("stops reading VirtualServices when Istio's CRD is deleted", func() {
			ns := newNamespace()
			Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
			p := fixtures.Policy(ns, "payments", "connector", 3, fixtures.Service("payments"))
			Expect(k8s.Create(ctx, p)).To(Succeed())
			Expect(k8s.Create(ctx, virtualService(ns, "x", `spec: {hosts: [payments], http: [{}]}`))).To(Succeed())
			expectReason(ns, p.Name, v1.ReasonAmplificationExceeded)

			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			crd.SetName(controllers.VirtualServiceCRDName)
			Expect(k8s.Delete(ctx, crd)).To(Succeed())
			expectReason(ns, p.Name, v1.ReasonPublished)
			expectHidden(ns, p.Name, 3)
			Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(crd), crd)) }).Should(BeTrue())
		})
	})
})
