package informer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// published is the ConfigMap the operator writes for payload p: managed-by
// label, policy label, controller owner reference to the RetryPolicy, and
// the name retrypolicy-<policy.name> in the policy's namespace.
func published(p *policyconfig.Payload) *corev1.ConfigMap {
	raw, err := policyconfig.Marshal(p)
	if err != nil {
		panic(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyconfig.ConfigMapName(p.Policy.Name), Namespace: p.Policy.Namespace,
			Labels: map[string]string{policyconfig.PolicyLabel: p.Policy.Name, policyconfig.ManagedByLabel: policyconfig.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.OwnerKind, Name: p.Policy.Name,
				UID: types.UID("uid-" + p.Policy.Name), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Data: map[string]string{policyconfig.DataKey: string(raw)},
	}
}

// logSink collects what the watcher logs.
type logSink struct{ lines chan string }

func (l logSink) Write(b []byte) (int, error) {
	select {
	case l.lines <- string(b):
	default:
	}
	return len(b), nil
}

func startTrusting(t *testing.T, cs kubernetes.Interface) (*informer.Informer, chan string, logSink) {
	t.Helper()
	w := informer.New(cs, "auth")
	logs := logSink{lines: make(chan string, 256)}
	w.Logger = slog.New(slog.NewTextHandler(logs, nil))
	changed := make(chan string, 256)
	w.OnChange(func(n string) { changed <- n })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w, changed, logs
}

// waitFor polls cond on the informer's asynchronous delivery; it asserts
// nothing about time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pod serves only what the operator published. Each forgery below is one
// property short of a published ConfigMap; every one is ignored, counted and
// logged, and none replaces or removes the real policy.
func TestInformerTrustsOnlyTheOperator(t *testing.T) {
	real := fixtures.Named("sms", 1)
	real.Policy.Namespace = "auth"
	cs := fake.NewClientset(published(real))
	w, _, logs := startTrusting(t, cs)
	if p, ok := w.Policy("sms"); !ok || p.Policy.Generation != 1 {
		t.Fatalf("the published policy is not served: %v %v", p, ok)
	}

	forged := func(mutate func(cm *corev1.ConfigMap)) *corev1.ConfigMap {
		p := fixtures.Named("sms", 99)
		p.Policy.Namespace = "auth"
		p.Policy.MaxAttempts = 1 // what an attacker would like every caller to do
		cm := published(p)
		mutate(cm)
		return cm
	}
	cases := map[string]*corev1.ConfigMap{
		"no managed-by label": forged(func(cm *corev1.ConfigMap) {
			cm.Name = "retrypolicy-sms-a"
			delete(cm.Labels, policyconfig.ManagedByLabel)
		}),
		"another managed-by": forged(func(cm *corev1.ConfigMap) {
			cm.Name = "retrypolicy-sms-b"
			cm.Labels[policyconfig.ManagedByLabel] = "helm"
		}),
		"no owner": forged(func(cm *corev1.ConfigMap) { cm.Name = "retrypolicy-sms-c"; cm.OwnerReferences = nil }),
		"an owner that is not the controller": forged(func(cm *corev1.ConfigMap) {
			cm.Name = "retrypolicy-sms-d"
			cm.OwnerReferences[0].Controller = nil
		}),
		"owned by a Deployment": forged(func(cm *corev1.ConfigMap) {
			cm.Name = "retrypolicy-sms-e"
			cm.OwnerReferences[0].APIVersion, cm.OwnerReferences[0].Kind = "apps/v1", "Deployment"
		}),
		"another policy's name":     forged(func(cm *corev1.ConfigMap) { cm.Name = "retrypolicy-evil" }),
		"a name without the prefix": forged(func(cm *corev1.ConfigMap) { cm.Name = "sms" }),
		"a payload from another namespace": forged(func(cm *corev1.ConfigMap) {
			p := fixtures.Named("sms-f", 99)
			p.Policy.Namespace = "payments"
			raw, _ := policyconfig.Marshal(p)
			cm.Name, cm.OwnerReferences[0].Name = "retrypolicy-sms-f", "sms-f"
			cm.Data[policyconfig.DataKey] = string(raw) // in namespace auth
		}),
	}
	ctx := context.Background()
	want := uint64(0)
	for name, cm := range cases {
		if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want++
		waitFor(t, name+" counted as ignored", func() bool { return w.Ignored() >= want })
		if p, _ := w.Policy("sms"); p.Policy.Generation != 1 {
			t.Fatalf("%s replaced the published policy: %+v", name, p.Policy)
		}
		if _, ok := w.Policy("sms-f"); ok {
			t.Fatalf("%s: a payload of another namespace is served", name)
		}
	}
	select {
	case line := <-logs.lines:
		if !strings.Contains(line, "ignored") {
			t.Errorf("log line %q does not say the ConfigMap was ignored", line)
		}
	default:
		t.Error("no log line for an ignored ConfigMap")
	}
	// Deleting a forgery removes nothing it did not supply.
	for name, cm := range cases {
		if err := cs.CoreV1().ConfigMaps("auth").Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The published policy's own update still applies, then its deletion.
	next := fixtures.Named("sms", 2)
	next.Policy.Namespace = "auth"
	if _, err := cs.CoreV1().ConfigMaps("auth").Update(ctx, published(next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 2 served", func() bool { p, _ := w.Policy("sms"); return p.Policy.Generation == 2 })
	if err := cs.CoreV1().ConfigMaps("auth").Delete(ctx, published(next).Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion applied", func() bool { _, ok := w.Policy("sms"); return !ok })
}

// A forged ConfigMap named for a policy that is not published yet, claiming
// that policy's name from another ConfigMap, is never served; deleting it
// removes nothing.
func TestInformerForgedClaimOnAnotherPolicy(t *testing.T) {
	cs := fake.NewClientset()
	w, _, _ := startTrusting(t, cs)
	claim := fixtures.Named("payments", 1)
	claim.Policy.Namespace = "auth"
	cm := published(claim)
	cm.Name = "retrypolicy-marketing" // the name of a ConfigMap it may write
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim ignored", func() bool { return w.Ignored() == 1 })
	reg := prometheus.NewRegistry()
	reg.MustRegister(watch.Collector(w))
	if got := counter(t, reg, "retryguard_policy_payloads_ignored_total"); got != 1 {
		t.Fatalf("retryguard_policy_payloads_ignored_total = %v, want 1", got)
	}
	for _, n := range []string{"payments", "marketing"} {
		if _, ok := w.Policy(n); ok {
			t.Fatalf("%s is served from a forged ConfigMap", n)
		}
	}
	real := fixtures.Named("payments", 3)
	real.Policy.Namespace = "auth"
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, published(real), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the real policy served", func() bool { p, ok := w.Policy("payments"); return ok && p.Policy.Generation == 3 })
	if err := cs.CoreV1().ConfigMaps("auth").Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another, trusted event proves the deletion was processed before it.
	other := fixtures.Named("ledger", 1)
	other.Policy.Namespace = "auth"
	if _, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, published(other), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ledger served", func() bool { _, ok := w.Policy("ledger"); return ok })
	if p, ok := w.Policy("payments"); !ok || p.Policy.Generation != 3 {
		t.Fatalf("deleting a forgery removed the real policy: %v %v", p, ok)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
