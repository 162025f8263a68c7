package webhooks_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
)

// The webhook suite runs the manager's webhook server for real: the API
// server calls it over TLS through the ValidatingWebhookConfiguration that
// `make manifests` generates, installed by envtest's WebhookInstallOptions.

var (
	testEnv  *envtest.Environment
	mgr      ctrl.Manager
	k8s      client.Client
	warnings = &testenv.WarningRecorder{}
	ctx      context.Context
	cancel   context.CancelFunc
	nsSeq    atomic.Int64
)

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Admission webhooks")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = testenv.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	testenv.EnableWebhooks(testEnv)
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	mgr, _, err = testenv.StartManaged(ctx, testEnv, cfg, policygraph.DefaultLimits(), testenv.Features{Webhooks: true, ProxyImage: testProxyImage})
	Expect(err).NotTo(HaveOccurred())

	userCfg := rest.CopyConfig(cfg)
	userCfg.WarningHandlerWithContext = warnings
	k8s, err = client.New(userCfg, client.Options{Scheme: testEnv.Scheme})
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

// newNamespace gives each spec its own namespace, so that pools, budgets
// and chains never leak between specs.
func newNamespace() string {
	name := fmt.Sprintf("wh-%d", nsSeq.Add(1))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// labelledNamespace creates a namespace with labels and waits until the
// webhooks' cache (which reads namespaces as metadata) has seen it.
func labelledNamespace(labels map[string]string) string {
	GinkgoHelper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wh-%d", nsSeq.Add(1)), Labels: labels}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	m := policyindex.NamespaceMetadata()
	m.SetName(n.Name)
	m.SetResourceVersion(n.ResourceVersion)
	settled(m)
	return n.Name
}

// settled waits until the manager's cache, which the webhooks read, has
// seen obj at the resourceVersion the API server returned.
func settled(obj client.Object) {
	key := client.ObjectKeyFromObject(obj)
	want := obj.GetResourceVersion()
	Eventually(func(g Gomega) {
		fresh := obj.DeepCopyObject().(client.Object)
		g.Expect(mgr.GetCache().Get(ctx, key, fresh)).To(Succeed())
		g.Expect(fresh.GetResourceVersion()).To(Equal(want))
	}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
}

// create stores obj and waits for the webhooks' cache to see it.
func create(obj client.Object) {
	warnings.Take()
	ExpectWithOffset(1, k8s.Create(ctx, obj)).To(Succeed())
	settled(obj)
}

var (
	policyIn = fixtures.Policy
	budgetIn = fixtures.Budget
	parent   = fixtures.Parent
	onPool   = fixtures.Pool
	onBudget = fixtures.BudgetRef
	critical = fixtures.Critical
)
