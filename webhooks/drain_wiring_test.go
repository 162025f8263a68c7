package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/webhooks"
)

// Every webhook the manager registers, composed
// by internal/manager as cmd/manager runs it (both validators and the proxy
// injector, behind CountDenials(Drain(srv))): each answer carries
// Connection: close once draining, none before, and a refusal is still
// counted.
var _ = Describe("the drain wraps every registered webhook", func() {
	It("closes the connection on every path while draining, and still counts refusals", func() {
		var d webhooks.Draining
		env := &envtest.Environment{Scheme: testEnv.Scheme} // no webhook configuration: the test posts the reviews
		c := testenv.ManagerConfig(env, policygraph.DefaultLimits(), testenv.Features{Webhooks: true, ProxyImage: testProxyImage, Draining: &d})
		c.WebhookPort = -1 // no listener: the test serves the webhook mux
		mctx, mcancel := context.WithCancel(ctx)
		defer mcancel()
		m, _, err := testenv.StartManager(mctx, env, testEnv.Config, c)
		Expect(err).NotTo(HaveOccurred())
		ts := httptest.NewServer(m.GetWebhookServer().WebhookMux())
		defer ts.Close()

		ns := "probe-drain"
		badBudget := fixtures.Budget(ns, "b", 50) // above the platform cap: refused
		badBudget.APIVersion, badBudget.Kind = v1.GroupVersion.String(), "RetryBudget"
		policy := fixtures.Policy(ns, "p", "connector", 3)
		policy.APIVersion, policy.Kind = v1.GroupVersion.String(), "RetryPolicy"
		pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		reviews := map[string]struct {
			obj  runtime.Object
			kind metav1.GroupVersionKind
		}{
			"/validate-policy-retryguard-io-v1alpha1-retrybudget": {badBudget,
				metav1.GroupVersionKind{Group: v1.GroupVersion.Group, Version: "v1alpha1", Kind: "RetryBudget"}},
			"/validate-policy-retryguard-io-v1alpha1-retrypolicy": {policy,
				metav1.GroupVersionKind{Group: v1.GroupVersion.Group, Version: "v1alpha1", Kind: "RetryPolicy"}},
			webhooks.InjectorPath: {pod, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		}
		post := func(path string) (*admissionv1.AdmissionReview, bool) {
			r := reviews[path]
			raw, err := json.Marshal(r.obj)
			Expect(err).NotTo(HaveOccurred())
			body, err := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "u", Kind: r.kind, Operation: admissionv1.Create, Namespace: ns,
					Object: runtime.RawExtension{Raw: raw}},
			})
			Expect(err).NotTo(HaveOccurred())
			res, err := ts.Client().Post(ts.URL+path, "application/json", bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			defer res.Body.Close()
			out, _ := io.ReadAll(res.Body)
			Expect(res.StatusCode).To(Equal(http.StatusOK), "%s: %s", path, out)
			var got admissionv1.AdmissionReview
			Expect(json.Unmarshal(out, &got)).To(Succeed(), "%s: %s", path, out)
			Expect(got.Response).NotTo(BeNil(), path)
			return &got, res.Close
		}
		denied := func() float64 {
			mfs, err := metrics.Registry.Gather()
			Expect(err).NotTo(HaveOccurred())
			sum := 0.0
			for _, mf := range mfs {
				if mf.GetName() == "retryguard_admission_denied_total" {
					for _, m := range mf.GetMetric() {
						sum += m.GetCounter().GetValue()
					}
				}
			}
			return sum
		}
		for path := range reviews {
			_, closed := post(path)
			Expect(closed).To(BeFalse(), "%s closed its connection while serving", path)
		}
		d.Start()
		before := denied()
		for path := range reviews {
			got, closed := post(path)
			Expect(closed).To(BeTrue(), "%s kept its connection while draining", path)
			if path == "/validate-policy-retryguard-io-v1alpha1-retrybudget" {
				Expect(got.Response.Allowed).To(BeFalse())
			}
		}
		Expect(denied()-before).To(BeNumerically(">=", 1), "a refusal while draining was not counted")
	})
})
