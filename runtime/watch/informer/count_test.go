package informer_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// countedPolicy is a payload as the controller now publishes it for a
// fleet budget: Counted, with the budget's UID, and no count.
func countedPolicy(name string) *policyconfig.Payload {
	p := fixtures.Fleet()
	p.Policy.Name, p.Policy.Namespace = name, "auth"
	p.Budget.Counted, p.Budget.Consumers = true, nil
	return p
}

// countConfigMap is the ConfigMap the operator publishes a budget's count
// in: retrybudget-<name>, the managed-by and budget labels, controlled by
// the RetryBudget whose UID is uid.
func countConfigMap(budgetName, uid string, c policyconfig.Consumers) *corev1.ConfigMap {
	raw, err := policyconfig.MarshalCount(&policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion,
		Namespace: "auth", Budget: budgetName, UID: uid, Consumers: c})
	if err != nil {
		panic(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyconfig.BudgetConfigMapName(budgetName), Namespace: "auth",
			Labels: map[string]string{policyconfig.BudgetLabel: budgetName, policyconfig.ManagedByLabel: policyconfig.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.BudgetOwnerKind, Name: budgetName,
				UID: types.UID(uid), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Data: map[string]string{policyconfig.CountDataKey: string(raw)},
	}
}

// joinedCount is the count the watcher serves with policy name (nil: none).
func joinedCount(w *informer.Informer, name string) *policyconfig.Consumers {
	p, ok := w.Policy(name)
	if !ok || p.Budget == nil {
		return nil
	}
	return p.Budget.Consumers
}

// A fleet budget's count is read from the budget's own ConfigMap, through
// the API server, and joined to every payload of that budget by name and
// UID; one count change is one ConfigMap written. A count of another UID,
// one the operator did not publish, or none at all gives no count, and the
// registry then gives no share.
func TestInformerJoinsTheBudgetsCount(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("auth")
	const policies = 5
	for i := range policies {
		if _, err := cms.Create(ctx, published(countedPolicy(fmt.Sprintf("p-%d", i))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w := informer.New(cs, "auth")
	w.Logger = slog.New(slog.DiscardHandler)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// No count yet: served, Counted, with nothing joined; no share.
	fake := clock.NewFake(fixtures.ObservedAt)
	reg := budget.NewRegistry(fake, budget.WithPod(fixtures.FleetPods()[0]),
		budget.WithDelivery(w.DeliveryBound()))
	p, ok := w.Policy("p-0")
	if !ok || !p.Budget.Counted || p.Budget.Consumers != nil {
		t.Fatalf("before any count: %+v %v", p, ok)
	}
	if b, _ := reg.Resolve("auth", p.Budget); b.Denominator() != budget.ZeroShare {
		t.Fatalf("no count, denominator %d, want no share", b.Denominator())
	}

	twenty := policyconfig.Consumers{Count: 20, ObservedAt: fixtures.ObservedAt, Members: policyconfig.EncodeMembers(fixtures.FleetPods())}
	cm, err := cms.Create(ctx, countConfigMap("telephony-provider", fixtures.BudgetUID, twenty), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range policies {
		waitFor(t, "the count joined to every policy of the budget", func() bool {
			c := joinedCount(w, fmt.Sprintf("p-%d", i))
			return c != nil && *c == twenty
		})
	}
	p, _ = w.Policy("p-0")
	b, _ := reg.Resolve("auth", p.Budget)
	fake.Advance(policyconfig.ConsumerCountDelivery) // a share grows after the delivery bound
	if b.Denominator() != 20 {
		t.Fatalf("a fresh count naming the pod, denominator %d, want 20", b.Denominator())
	}

	// A newer count reaches every policy through one write.
	ten := policyconfig.Consumers{Count: 10, ObservedAt: fixtures.ObservedAt.Add(time.Second), Members: policyconfig.EncodeMembers(fixtures.FleetPods()[:10])}
	cm.Data = countConfigMap("telephony-provider", fixtures.BudgetUID, ten).Data
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range policies {
		waitFor(t, "the new count joined to every policy", func() bool {
			c := joinedCount(w, fmt.Sprintf("p-%d", i))
			return c != nil && *c == ten
		})
	}

	// Not the operator's (no owner) or not this budget's (another
	// RetryBudget as owner): ignored, the last good count stays.
	ignored := w.Ignored()
	forged := countConfigMap("telephony-provider", fixtures.BudgetUID, twenty)
	forged.ResourceVersion, forged.OwnerReferences = cm.ResourceVersion, nil
	if cm, err = cms.Update(ctx, forged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the count without an owner ignored", func() bool { return w.Ignored() > ignored })
	if c := joinedCount(w, "p-0"); c == nil || *c != ten {
		t.Fatalf("an unowned count replaced the good one: %+v", c)
	}

	// The budget deleted and created again: the count of the new UID is
	// not the payloads' budget, so nothing is joined until they are
	// republished with it.
	recreated := countConfigMap("telephony-provider", "8e4d3b72-1c6f-4a8b-8d2e-3f9a7b5c6d01", twenty)
	recreated.ResourceVersion = cm.ResourceVersion
	if cm, err = cms.Update(ctx, recreated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range policies {
		waitFor(t, "a count of another UID joined to no policy", func() bool { return joinedCount(w, fmt.Sprintf("p-%d", i)) == nil })
	}

	// The count's ConfigMap deleted: no count.
	restored := countConfigMap("telephony-provider", fixtures.BudgetUID, ten)
	restored.ResourceVersion = cm.ResourceVersion
	if _, err = cms.Update(ctx, restored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the count back", func() bool { return joinedCount(w, "p-0") != nil })
	if err := cms.Delete(ctx, restored.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no count once its ConfigMap is gone", func() bool { return joinedCount(w, "p-0") == nil })
}
