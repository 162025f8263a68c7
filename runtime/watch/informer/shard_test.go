package informer_test

import (
	"context"
	"log/slog"
	"testing"

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

// shardedCount is the count the operator now publishes: no members, at
// membership generation gen.
func shardedCount(gen int64, count int32) *corev1.ConfigMap {
	cm := countConfigMap("telephony-provider", fixtures.BudgetUID, policyconfig.Consumers{Count: count, ObservedAt: fixtures.ObservedAt})
	c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
	if err != nil {
		panic(err)
	}
	c.MembersGeneration = gen
	raw, err := policyconfig.MarshalCount(c)
	if err != nil {
		panic(err)
	}
	cm.Data[policyconfig.CountDataKey] = string(raw)
	return cm
}

// shardConfigMap is the ConfigMap the operator publishes one shard of the
// budget's members in, naming uids (all of shard), written for gen.
func shardConfigMap(shard string, gen int64, uids ...string) *corev1.ConfigMap {
	raw, err := policyconfig.MarshalMemberShard(&policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion,
		Namespace: "auth", Budget: "telephony-provider", UID: fixtures.BudgetUID, Shard: shard, Generation: gen,
		Members: policyconfig.EncodeMembers(uids)})
	if err != nil {
		panic(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyconfig.MemberShardConfigMapName(shard, "telephony-provider"), Namespace: "auth",
			Labels: map[string]string{policyconfig.MembersLabel: "telephony-provider", policyconfig.ShardLabel: shard,
				policyconfig.ManagedByLabel: policyconfig.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.BudgetOwnerKind, Name: "telephony-provider",
				UID: types.UID(fixtures.BudgetUID), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Data: map[string]string{policyconfig.MembersDataKey: string(raw)},
	}
}

// A pod reads the count and its own shard of the members only: it holds
// a share when its shard, of the count's generation or an earlier one,
// names it; a shard newer than the count (an addition written before its
// count arrived), another shard, or none gives no share.
func TestInformerJoinsItsOwnShard(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("auth")
	pod := fixtures.FleetPods()[0]
	own := policyconfig.ShardOf(pod)
	var other string // a pod of another shard
	for _, u := range fixtures.FleetPods() {
		if policyconfig.ShardOf(u) != own {
			other = u
			break
		}
	}
	if _, err := cms.Create(ctx, published(countedPolicy("p-0")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	count, err := cms.Create(ctx, shardedCount(3, 20), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Another shard's ConfigMap never reaches this pod: the API server
	// selects its own shard only.
	if _, err := cms.Create(ctx, shardConfigMap(policyconfig.ShardOf(other), 3, other), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := informer.New(cs, "auth")
	w.Logger, w.PodUID = slog.New(slog.DiscardHandler), pod
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(fixtures.ObservedAt)
	reg := budget.NewRegistry(fake, budget.WithPod(pod), budget.WithDelivery(w.DeliveryBound()))
	denominator := func() int64 {
		p, _ := w.Policy("p-0")
		b, _ := reg.Resolve("auth", p.Budget)
		fake.Advance(policyconfig.ConsumerCountDelivery)
		return b.Denominator()
	}
	if c := joinedCount(w, "p-0"); c == nil || c.Count != 20 || c.Members != "" || w.Ignored() != 0 {
		t.Fatalf("the count without this pod's shard: %+v (ignored %d)", c, w.Ignored())
	}
	if d := denominator(); d != budget.ZeroShare {
		t.Fatalf("no shard names the pod, denominator %d, want no share", d)
	}

	// Its shard, newer than the count: not yet.
	shard, err := cms.Create(ctx, shardConfigMap(own, 4, pod), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod started now has read it (Start returns after the first sync).
	w = informer.New(cs, "auth")
	w.Logger, w.PodUID = slog.New(slog.DiscardHandler), pod
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c := joinedCount(w, "p-0"); c == nil || c.Includes(pod) || w.Rejected()+w.Ignored() != 0 {
		t.Fatalf("a shard of generation 4 under a count of generation 3: %+v", c)
	}
	// The count of its generation arrives: the pod is named.
	next := shardedCount(4, 20)
	next.ResourceVersion = count.ResourceVersion
	if count, err = cms.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod named by its shard", func() bool { return joinedCount(w, "p-0").Includes(pod) })
	if d := denominator(); d != 20 {
		t.Fatalf("named by its shard under a fresh count, denominator %d, want 20", d)
	}
	// A later count (a refresh, or another shard's change) keeps it named.
	later := shardedCount(9, 20)
	later.ResourceVersion = count.ResourceVersion
	if _, err = cms.Update(ctx, later, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later count", func() bool { return joinedCount(w, "p-0").Count == 20 && joinedCount(w, "p-0").Includes(pod) })

	// Removed from its shard: no share.
	gone := shardConfigMap(own, 9)
	gone.ResourceVersion = shard.ResourceVersion
	if shard, err = cms.Update(ctx, gone, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod no longer named", func() bool { return !joinedCount(w, "p-0").Includes(pod) })

	// A shard of another budget's UID names no one; a deleted shard
	// neither.
	back := shardConfigMap(own, 9, pod)
	back.ResourceVersion = shard.ResourceVersion
	back.OwnerReferences[0].UID = "8e4d3b72-1c6f-4a8b-8d2e-3f9a7b5c6d01"
	ignored := w.Ignored()
	if _, err = cms.Update(ctx, back, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a shard of another RetryBudget ignored", func() bool { return w.Ignored() > ignored })
	if joinedCount(w, "p-0").Includes(pod) {
		t.Fatal("a shard owned by another RetryBudget named the pod")
	}
	if err := cms.Delete(ctx, back.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shard gone", func() bool { return !joinedCount(w, "p-0").Includes(pod) })
	if w.Rejected() != 0 {
		t.Fatalf("%d rejected", w.Rejected())
	}

	// A pod without a UID watches no shard: never named.
	anon := informer.New(cs, "auth")
	anon.Logger, anon.PodUID = slog.New(slog.DiscardHandler), ""
	if err := anon.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c := joinedCount(anon, "p-0"); c == nil || c.Members != "" {
		t.Fatalf("a pod without a UID: %+v", c)
	}
}

// A shard update that does not parse names no one: the pod it named holds
// no share afterwards (the shard it replaced is not kept, since a shard has
// no freshness of its own and the update may have removed the pod).
func TestAShardThatDoesNotParseNamesNoOne(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("auth")
	pod := fixtures.FleetPods()[0]
	if _, err := cms.Create(ctx, published(countedPolicy("p-0")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, shardedCount(4, 20), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shard, err := cms.Create(ctx, shardConfigMap(policyconfig.ShardOf(pod), 4, pod), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := informer.New(cs, "auth")
	w.Logger, w.PodUID = slog.New(slog.DiscardHandler), pod
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !joinedCount(w, "p-0").Includes(pod) {
		t.Fatal("the pod is not named by its shard")
	}
	bad := shard.DeepCopy()
	bad.Data[policyconfig.MembersDataKey] = `{"schemaVersion": "members/v9"}`
	if _, err := cms.Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shard rejected", func() bool { return w.Rejected() > 0 })
	waitFor(t, "the pod no longer named", func() bool { return !joinedCount(w, "p-0").Includes(pod) })
}
