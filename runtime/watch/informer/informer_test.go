package informer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

func startAPIServer(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		tb.Fatal(
			"KUBEBUILDER_ASSETS must name a directory with kube-apiserver and etcd; run the tests with `make test`, or export " +
				"KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)",
		)
	}
	// A bare API server: the informer reads ConfigMaps and needs no CRD.
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "auth"}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return cs
}

// configMap is a ConfigMap as the operator publishes it (see published).
func configMap(name string, data []byte) *corev1.ConfigMap {
	p := fixtures.Named(name, 1)
	cm := published(p)
	cm.Data[policyconfig.DataKey] = string(data)
	return cm
}

// applyAndWait updates the ConfigMap and returns how long until the watcher
// serves generation gen.
func applyAndWait(tb testing.TB, cs kubernetes.Interface, w watch.Watcher, changed <-chan string, cm *corev1.ConfigMap, gen int64) time.Duration {
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", gen))
	cm.Data[policyconfig.DataKey] = string(raw)
	start := time.Now()
	updated, err := cs.CoreV1().ConfigMaps("auth").Update(context.Background(), cm, metav1.UpdateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	*cm = *updated
	timeout := time.After(10 * time.Second)
	for {
		if p, ok := w.Policy("sms"); ok && p.Policy.Generation == gen {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-timeout:
			tb.Fatalf("generation %d never reached the watcher", gen)
		}
	}
}

// A ConfigMap update reaches an informer-mode watcher; a corrupt update
// keeps the last good policy; a deletion removes it.
func TestInformerHotReload(t *testing.T) {
	cs := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", 1))
	cm, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, configMap("sms", raw), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An unlabelled ConfigMap is none of the watcher's business.
	other := configMap("other", raw)
	other.Labels = nil
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := informer.New(cs, "auth")
	changed := make(chan string, 64)
	w.OnChange(func(n string) { changed <- n })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p, ok := w.Policy("sms"); !ok || p.Policy.Generation != 1 {
		t.Fatalf("after the first sync: %v %v", p, ok)
	}
	if _, ok := w.Policy("other"); ok {
		t.Fatal("an unlabelled ConfigMap was read")
	}
	applyAndWait(t, cs, w, changed, cm, 2)

	cm.Data[policyconfig.DataKey] = `{"schemaVersion":"corrupt"}`
	if cm, err = cs.CoreV1().ConfigMaps("auth").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for w.Rejected() == 0 {
		select {
		case <-deadline:
			t.Fatal("the corrupt update never arrived")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if p, _ := w.Policy("sms"); p.Policy.Generation != 2 {
		t.Fatalf("a corrupt update replaced the last good policy: %v", p)
	}
	if err := cs.CoreV1().ConfigMaps("auth").Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := w.Policy("sms"); !ok {
			break
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("the deletion never arrived")
		}
	}
}

// The informer selects what the operator publishes on the API server: a
// tenant's ConfigMaps that carry the policy label but not the operator's
// managed-by label (20 of 500 KB, as in the finding), another managed-by,
// or the managed-by label without the policy label never reach the pod. A
// pod that received them would count and log each one.
func TestInformerNeverReceivesUnmanagedConfigMaps(t *testing.T) {
	cs := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	junk := strings.Repeat("x", 500<<10)
	create := func(name string, labels map[string]string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "auth", Labels: labels},
			Data: map[string]string{policyconfig.DataKey: junk}}
		if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		create(fmt.Sprintf("junk-before-%d", i), map[string]string{policyconfig.PolicyLabel: "sms"})
	}
	var logs strings.Builder
	var mu sync.Mutex
	w := informer.New(cs, "auth")
	w.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	changed := make(chan string, 64)
	w.OnChange(func(n string) { changed <- n })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		create(fmt.Sprintf("junk-after-%d", i), map[string]string{policyconfig.PolicyLabel: "sms"})
	}
	create("another-manager", map[string]string{policyconfig.PolicyLabel: "sms", policyconfig.ManagedByLabel: "helm"})
	create("managed-without-policy", map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue})
	// A published ConfigMap created last: once it is served, every event
	// before it has been delivered (one watch, in order).
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", 1))
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, configMap("sms", raw), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		if _, ok := w.Policy("sms"); ok {
			break
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatal("the published policy never arrived")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if w.Ignored() != 0 || w.Rejected() != 0 || logs.Len() != 0 {
		t.Fatalf("unmanaged ConfigMaps reached the pod: %d ignored, %d rejected; logs:\n%.2000s", w.Ignored(), w.Rejected(), logs.String())
	}
}

// An informer told no namespace (a pod whose POD_NAMESPACE is unset) does
// not start: informers read "" as every namespace, and policies are served
// by name alone, so another namespace's policy of the same name would be
// enforced. Before, it started and served auth's sms to a pod of any
// namespace.
func TestInformerWithoutANamespaceDoesNotStart(t *testing.T) {
	cs := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", 1))
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, configMap("sms", raw), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := informer.New(cs, "")
	w.Logger = slog.New(slog.DiscardHandler)
	err := w.Start(ctx)
	if _, served := w.Policy("sms"); err == nil || served || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("Start = %v, served %v: want a refusal naming the namespace and nothing served", err, served)
	}
}

// lockedWriter serialises a test's log sink.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// BenchmarkInformerApplyToEnforced reports p50 and p99 of the time from a
// ConfigMap update to the watcher serving it. Run with -benchtime 200x.
func BenchmarkInformerApplyToEnforced(b *testing.B) {
	cs := startAPIServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", 1))
	cm, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, configMap("sms", raw), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w := informer.New(cs, "auth")
	changed := make(chan string, 1024)
	w.OnChange(func(n string) {
		select {
		case changed <- n:
		default:
		}
	})
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	gen := int64(1)
	for b.Loop() {
		gen++
		lat = append(lat, applyAndWait(b, cs, w, changed, cm, gen))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
