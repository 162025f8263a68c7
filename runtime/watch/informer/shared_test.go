package informer_test

import (
	"context"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// sharedNS is the namespace of the shared budget; the pods are in auth.
const sharedNS = "telephony"

// otherBudgetUID is the UID of a second RetryBudget named like Fleet's.
const otherBudgetUID = "8e4d3b72-1c6f-4a8b-8d2e-3f9a7b5c6d01"

// sharedPolicy is a payload of auth whose fleet budget is telephony's
// (budgetRef.namespace), of UID uid.
func sharedPolicy(name, uid string) *policyconfig.Payload {
	p := countedPolicy(name)
	p.Budget.Namespace, p.Budget.UID = sharedNS, uid
	return p
}

// policyOwner is the controller owner reference of a copy: the RetryPolicy
// of auth that draws on the budget.
func policyOwner(policy string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.SharedOwnerKind, Name: policy,
		UID: types.UID("uid-" + policy), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
}

// countCopy is the copy in auth of the count of budgetNS/telephony-provider
// as the controller publishes it: retrysharedbudget-<budgetNS>.<name>, the
// original's labels and data (whose namespace is budgetNS), controlled by
// RetryPolicy owner.
func countCopy(budgetNS, uid string, gen int64, count int32, owner string) *corev1.ConfigMap {
	const name = "telephony-provider"
	raw, err := policyconfig.MarshalCount(&policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion, Namespace: budgetNS,
		Budget: name, UID: uid, MembersGeneration: gen, Consumers: policyconfig.Consumers{Count: count, ObservedAt: fixtures.ObservedAt}})
	if err != nil {
		panic(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyconfig.BudgetConfigMapNameIn("auth", budgetNS, name), Namespace: "auth",
			Labels:          map[string]string{policyconfig.BudgetLabel: name, policyconfig.ManagedByLabel: policyconfig.ManagedByValue},
			OwnerReferences: policyOwner(owner),
		},
		Data: map[string]string{policyconfig.CountDataKey: string(raw)},
	}
}

// shardCopy is the copy in auth of shard of telephony's budget's members,
// naming uids, written for gen and controlled by RetryPolicy owner.
func shardCopy(uid, shard string, gen int64, owner string, uids ...string) *corev1.ConfigMap {
	const name = "telephony-provider"
	raw, err := policyconfig.MarshalMemberShard(&policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion,
		Namespace: sharedNS, Budget: name, UID: uid, Shard: shard, Generation: gen, Members: policyconfig.EncodeMembers(uids)})
	if err != nil {
		panic(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyconfig.MemberShardConfigMapNameIn("auth", shard, sharedNS, name), Namespace: "auth",
			Labels: map[string]string{policyconfig.MembersLabel: name, policyconfig.ShardLabel: shard,
				policyconfig.ManagedByLabel: policyconfig.ManagedByValue},
			OwnerReferences: policyOwner(owner),
		},
		Data: map[string]string{policyconfig.MembersDataKey: string(raw)},
	}
}

// shareOf is a function that reports the share the pod holds of policy's
// budget, as a Registry gives it after the delivery bound.
func shareOf(w *informer.Informer, pod string) func(policy string) int64 {
	fake := clock.NewFake(fixtures.ObservedAt)
	reg := budget.NewRegistry(fake, budget.WithPod(pod), budget.WithDelivery(w.DeliveryBound()))
	return func(policy string) int64 {
		p, _ := w.Policy(policy)
		b, _ := reg.Resolve("auth", p.Budget)
		fake.Advance(policyconfig.ConsumerCountDelivery)
		return b.Denominator()
	}
}

func startPod(t *testing.T, cs kubernetes.Interface, pod string) *informer.Informer {
	t.Helper()
	w := informer.New(cs, "auth")
	w.Logger, w.PodUID = slog.New(slog.DiscardHandler), pod
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return w
}

func createCM(t *testing.T, cs kubernetes.Interface, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	out, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func deleteCM(t *testing.T, cs kubernetes.Interface, cm *corev1.ConfigMap) {
	t.Helper()
	if err := cs.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A pod of auth whose policy draws on telephony's budget reads the count
// and its shard from the copies the controller publishes in auth
// (controlled by a RetryPolicy of auth, the budget's namespace in their
// data) and holds its share; deleting either copy takes the share away.
func TestInformerJoinsASharedBudgetsCopies(t *testing.T) {
	cs := startAPIServer(t)
	pod := fixtures.FleetPods()[0]
	createCM(t, cs, published(sharedPolicy("p-0", fixtures.BudgetUID)))
	count := createCM(t, cs, countCopy(sharedNS, fixtures.BudgetUID, 3, 20, "p-0"))
	shard := createCM(t, cs, shardCopy(fixtures.BudgetUID, policyconfig.ShardOf(pod), 3, "p-0", pod))
	w := startPod(t, cs, pod)
	share := shareOf(w, pod)
	if c := joinedCount(w, "p-0"); c == nil || c.Count != 20 || !c.Includes(pod) || w.Ignored()+w.Rejected() != 0 {
		t.Fatalf("the copies of telephony's count and shard: joined %+v (ignored %d, rejected %d)", c, w.Ignored(), w.Rejected())
	}
	if d := share("p-0"); d != 20 {
		t.Fatalf("named by the shared budget's copies, denominator %d, want 20", d)
	}

	// The shard's copy deleted: the count stays, naming no one.
	deleteCM(t, cs, shard)
	waitFor(t, "the pod no longer named once its shard's copy is gone", func() bool {
		c := joinedCount(w, "p-0")
		return c != nil && c.Count == 20 && !c.Includes(pod)
	})
	if d := share("p-0"); d != budget.ZeroShare {
		t.Fatalf("no shard copy, denominator %d, want no share", d)
	}
	createCM(t, cs, shardCopy(fixtures.BudgetUID, policyconfig.ShardOf(pod), 3, "p-0", pod))
	waitFor(t, "the pod named again", func() bool { return joinedCount(w, "p-0").Includes(pod) })

	// The count's copy deleted: no count, no share.
	deleteCM(t, cs, count)
	waitFor(t, "no count once its copy is gone", func() bool { return joinedCount(w, "p-0") == nil })
	if d := share("p-0"); d != budget.ZeroShare {
		t.Fatalf("no count copy, denominator %d, want no share", d)
	}
}

// A pod that draws on its own namespace's telephony-provider and on
// telephony's of the same name holds two counts, each joined to its own
// budget's policies only, and losing one leaves the other.
func TestInformerKeepsALocalAndASharedBudgetApart(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	pod := fixtures.FleetPods()[0]
	own := policyconfig.ShardOf(pod)
	createCM(t, cs, published(countedPolicy("p-local")))
	createCM(t, cs, published(sharedPolicy("p-shared", otherBudgetUID)))
	createCM(t, cs, shardedCount(3, 20))
	createCM(t, cs, shardConfigMap(own, 3, pod))
	sharedCount := createCM(t, cs, countCopy(sharedNS, otherBudgetUID, 5, 10, "p-shared"))
	createCM(t, cs, shardCopy(otherBudgetUID, own, 5, "p-shared", pod))
	w := startPod(t, cs, pod)
	share := shareOf(w, pod)
	counts := func() (local, shared *policyconfig.Consumers) {
		return joinedCount(w, "p-local"), joinedCount(w, "p-shared")
	}
	if l, s := counts(); l == nil || l.Count != 20 || !l.Includes(pod) || s == nil || s.Count != 10 || !s.Includes(pod) {
		t.Fatalf("local count %+v, shared count %+v: want 20 and 10, both naming the pod", l, s)
	}
	if l, s := share("p-local"), share("p-shared"); l != 20 || s != 10 {
		t.Fatalf("denominators local %d, shared %d: want 20 and 10", l, s)
	}

	// A change of the shared count reaches its policy only.
	next := countCopy(sharedNS, otherBudgetUID, 5, 12, "p-shared")
	next.ResourceVersion = sharedCount.ResourceVersion
	if _, err := cs.CoreV1().ConfigMaps("auth").Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shared count of 12", func() bool { s := joinedCount(w, "p-shared"); return s != nil && s.Count == 12 })
	if l, _ := counts(); l == nil || l.Count != 20 || !l.Includes(pod) {
		t.Fatalf("the shared count's change reached the local budget: %+v", l)
	}

	// The shared copy gone: the local count stays.
	deleteCM(t, cs, next)
	waitFor(t, "no shared count", func() bool { return joinedCount(w, "p-shared") == nil })
	if l, _ := counts(); l == nil || l.Count != 20 || !l.Includes(pod) {
		t.Fatalf("deleting the shared copy removed the local count: %+v", l)
	}
	if d := share("p-local"); d != 20 {
		t.Fatalf("local denominator %d after the shared copy went, want 20", d)
	}
}

// Only the controller's copies are joined: a copy controlled by a
// RetryBudget (the budget's own form, which cannot be a copy's), one under
// another name than BudgetConfigMapNameIn's, or one whose data says another
// budget namespace is ignored, and a consistent copy of another namespace's
// budget of that name is not the payload's budget: no share from any. The
// real copies, written last, are joined; deleting a forgery removes
// nothing.
func TestInformerJoinsOnlyTheControllersCopies(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	pod := fixtures.FleetPods()[0]
	own := policyconfig.ShardOf(pod)
	createCM(t, cs, published(sharedPolicy("p-0", fixtures.BudgetUID)))
	w := startPod(t, cs, pod)
	share := shareOf(w, pod)

	// Trusted (a copy of payments' budget) but not the payload's: it is
	// not counted as ignored; the ignored forgery after it orders it.
	createCM(t, cs, countCopy("payments", fixtures.BudgetUID, 3, 20, "p-0"))
	budgetOwned := countCopy(sharedNS, fixtures.BudgetUID, 3, 20, "p-0")
	budgetOwned.OwnerReferences[0].Kind, budgetOwned.OwnerReferences[0].Name = policyconfig.BudgetOwnerKind, "telephony-provider"
	budgetOwned.OwnerReferences[0].UID = fixtures.BudgetUID
	ownName := countCopy(sharedNS, fixtures.BudgetUID, 3, 20, "p-0")
	ownName.Name = policyconfig.BudgetConfigMapName("telephony-provider")
	otherName := countCopy(sharedNS, fixtures.BudgetUID, 3, 20, "p-0")
	otherName.Name = policyconfig.BudgetConfigMapNameIn("auth", sharedNS, "sms-provider")
	otherNS := countCopy("payments", fixtures.BudgetUID, 3, 20, "p-0")
	otherNS.Name = policyconfig.BudgetConfigMapNameIn("auth", sharedNS, "telephony-provider")
	shardBudgetOwned := shardCopy(fixtures.BudgetUID, own, 3, "p-0", pod)
	shardBudgetOwned.OwnerReferences = budgetOwned.OwnerReferences
	shardOwnName := shardCopy(fixtures.BudgetUID, own, 3, "p-0", pod)
	shardOwnName.Name = policyconfig.MemberShardConfigMapName(own, "telephony-provider")
	for _, f := range []struct {
		what string
		cm   *corev1.ConfigMap
		keep bool // deleted once the real copies are joined
	}{
		{"a copy controlled by the RetryBudget", budgetOwned, false},
		{"a copy under the budget's own name", ownName, true},
		{"a copy under another budget's copy's name", otherName, true},
		{"a copy whose count is of another namespace than its name's", otherNS, false},
		{"a shard copy controlled by the RetryBudget", shardBudgetOwned, false},
		{"a shard copy under the budget's own name", shardOwnName, true},
	} {
		ignored := w.Ignored()
		cm := createCM(t, cs, f.cm)
		waitFor(t, f.what+" ignored", func() bool { return w.Ignored() > ignored })
		if c := joinedCount(w, "p-0"); c != nil {
			t.Fatalf("after %s: joined %+v", f.what, c)
		}
		if d := share("p-0"); d != budget.ZeroShare {
			t.Fatalf("after %s: denominator %d, want no share", f.what, d)
		}
		if !f.keep {
			deleteCM(t, cs, cm)
		}
	}
	if w.Rejected() != 0 {
		t.Fatalf("%d rejected", w.Rejected())
	}

	// The controller's copies: joined, and a share.
	count := createCM(t, cs, countCopy(sharedNS, fixtures.BudgetUID, 3, 20, "p-0"))
	createCM(t, cs, shardCopy(fixtures.BudgetUID, own, 3, "p-0", pod))
	waitFor(t, "the real copies joined", func() bool { c := joinedCount(w, "p-0"); return c != nil && c.Count == 20 && c.Includes(pod) })
	if d := share("p-0"); d != 20 {
		t.Fatalf("the real copies, denominator %d, want 20", d)
	}

	// Deleting the kept forgeries removes nothing; an event after them on
	// the same watch (a later count; another forged shard, ignored) proves
	// the deletions were applied before it.
	deleteCM(t, cs, ownName)
	deleteCM(t, cs, otherName)
	deleteCM(t, cs, shardOwnName)
	next := countCopy(sharedNS, fixtures.BudgetUID, 3, 19, "p-0")
	next.ResourceVersion = count.ResourceVersion
	if _, err := cs.CoreV1().ConfigMaps("auth").Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ignored := w.Ignored()
	shardOtherName := shardCopy(fixtures.BudgetUID, own, 3, "p-0", pod)
	shardOtherName.Name = policyconfig.MemberShardConfigMapNameIn("auth", own, sharedNS, "sms-provider")
	createCM(t, cs, shardOtherName)
	waitFor(t, "the count of 19", func() bool { c := joinedCount(w, "p-0"); return c != nil && c.Count == 19 })
	waitFor(t, "a shard copy under another budget's name ignored", func() bool { return w.Ignored() > ignored })
	if !joinedCount(w, "p-0").Includes(pod) {
		t.Fatal("deleting a forged shard copy removed the real one")
	}
}
