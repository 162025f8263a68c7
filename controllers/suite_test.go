package controllers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// The controller suite runs the manager with its controllers for real and
// no webhooks, so that a test can do what admission would refuse: racing
// creates, shared pools, missing budgets.

var (
	testEnv *envtest.Environment
	mgr     ctrl.Manager
	k8s     client.Client
	ctx     context.Context
	cancel  context.CancelFunc
	nsSeq   atomic.Int64
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	RunSpecs(t, "Controllers")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	var err error
	testEnv, err = testenv.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	mgr, _, err = testenv.StartManaged(ctx, testEnv, cfg, policygraph.DefaultLimits(), testenv.Features{Controllers: true})
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

func newNamespace() string {
	name := fmt.Sprintf("ctl-%d", nsSeq.Add(1))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// publishedConnector creates, in a new namespace with the default budget,
// a connector policy of 3 attempts named name, and waits until it is
// Published.
func publishedConnector(name string, opts ...fixtures.Option) (string, *v1.RetryPolicy) {
	GinkgoHelper()
	ns := newNamespace()
	Expect(k8s.Create(ctx, fixtures.Budget(ns, fixtures.DefaultBudget, 10))).To(Succeed())
	p := fixtures.Policy(ns, name, "connector", 3, opts...)
	Expect(k8s.Create(ctx, p)).To(Succeed())
	expectReason(ns, p.Name, v1.ReasonPublished)
	return ns, p
}

// edit re-reads obj, applies change and updates it, retrying when the
// controller's status writes got there first.
func edit[T client.Object](obj T, change func(T)) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return k8s.Update(ctx, obj)
	})).To(Succeed())
}

// payloadOf reads and parses a policy's published payload.
func payloadOf(g Gomega, ns, policy string) (*policyconfig.Payload, *corev1.ConfigMap) {
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.ConfigMapName(policy)}, &cm)).To(Succeed())
	p, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return p, &cm
}

// readyOf returns a policy's Ready condition (nil until the controller sets it).
func readyOf(g Gomega, ns, name string) (*metav1.Condition, *v1.RetryPolicy) {
	var p v1.RetryPolicy
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
	return meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady), &p
}

// expectReason waits until a policy is published with the given Ready
// reason and the matching enforcement in its payload.
func expectReason(ns, name, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		c, p := readyOf(g, ns, name)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(reason))
		g.Expect(c.ObservedGeneration).To(Equal(p.Generation))
		payload, _ := payloadOf(g, ns, name)
		g.Expect(payload.Policy.Generation).To(Equal(p.Generation))
		if reason == "Published" {
			g.Expect(payload.Enforcement.Mode).To(Equal(policyconfig.Enforced))
		} else {
			g.Expect(payload.Enforcement).To(HaveField("Mode", policyconfig.NoRetry))
			g.Expect(payload.Enforcement).To(HaveField("Reason", reason))
		}
	}).Should(Succeed())
}
