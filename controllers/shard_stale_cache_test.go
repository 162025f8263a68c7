package controllers_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
)

// staleConfigMaps is a manager's cache that has not yet seen some writes:
// its ConfigMap reads answer from a snapshot of the namespace taken at
// freeze; everything else, and every write, goes to the API server.
type staleConfigMaps struct {
	noPolicies
	snapshot map[string]corev1.ConfigMap
}

func (c *staleConfigMaps) freeze(ctx context.Context, ns string) error {
	var l corev1.ConfigMapList
	if err := c.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return err
	}
	c.snapshot = map[string]corev1.ConfigMap{}
	for _, cm := range l.Items {
		c.snapshot[cm.Name] = cm
	}
	return nil
}

func (c *staleConfigMaps) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || c.snapshot == nil {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	live, ok := c.snapshot[key.Name]
	if !ok {
		return c.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "absent-from-the-cache"}, obj) // a NotFound
	}
	live.DeepCopyInto(cm)
	return nil
}

func (c *staleConfigMaps) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	cms, ok := l.(*corev1.ConfigMapList)
	if !ok || c.snapshot == nil {
		return c.noPolicies.List(ctx, l, opts...)
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	cms.Items = nil
	for _, cm := range c.snapshot {
		if o.LabelSelector == nil || o.LabelSelector.Matches(labels.Set(cm.Labels)) {
			cms.Items = append(cms.Items, cm)
		}
	}
	return nil
}

// A pod added to a shard in one reconcile and relabelled out of the
// budget before the cache saw that write is removed from its shard at the
// next reconcile: the shard's write is decided from the API server's
// shard, not from a stale cached one equal to what is wanted (which would
// leave the pod named, holding a share the shrunken count does not count).
// startFleetBudget starts an API server with namespace ns and the fleet
// budget name of the pods labelled app=app in it.
func startFleetBudget(t *testing.T, ns, name, app string) (*envtest.Environment, client.Client, *v1.RetryBudget) {
	t.Helper()
	env, cfg := testenv.StartEnvironment(t, false)
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	b := fleetBudget(ns, name, app, 5)
	if err := c.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	return env, c, b
}

func TestAShardWriteTheCacheHasNotSeenIsUndone(t *testing.T) {
	env, base, b := startFleetBudget(t, "shop", "checkout", "sender")
	ctx := t.Context()
	stale := &staleConfigMaps{noPolicies: noPolicies{base}}
	r := &controllers.RetryBudgetReconciler{Client: stale, APIReader: base, Scheme: env.Scheme, Limits: policygraph.DefaultLimits()}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatal(err)
		}
	}
	p1 := newPod("shop", "sender-1", "sender")
	if err := base.Create(ctx, p1); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if err := stale.freeze(ctx, "shop"); err != nil { // the cache sees nothing written from here on
		t.Fatal(err)
	}
	p2 := newPod("shop", "sender-2", "sender")
	if err := base.Create(ctx, p2); err != nil {
		t.Fatal(err)
	}
	reconcile() // p2 named in its shard
	shardOf := func(uid string) *policyconfig.MemberShard {
		t.Helper()
		var cm corev1.ConfigMap
		if err := base.Get(ctx, client.ObjectKey{Namespace: "shop", Name: policyconfig.MemberShardConfigMapName(policyconfig.ShardOf(uid), "checkout")},
			&cm); err != nil {
			t.Fatal(err)
		}
		s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	named := func(s *policyconfig.MemberShard, uid string) bool {
		return (&policyconfig.Consumers{Members: s.Members}).Includes(uid)
	}
	if s := shardOf(string(p2.UID)); !named(s, string(p2.UID)) {
		t.Fatalf("precondition: the added pod is not named in its shard: %+v", s)
	}
	p2.Labels = map[string]string{"app": "other"}
	if err := base.Update(ctx, p2); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if s := shardOf(string(p2.UID)); named(s, string(p2.UID)) {
		t.Errorf("the relabelled pod is still named in shard %s (%s) after the count dropped it", s.Shard, s.Members)
	}
	if s := shardOf(string(p1.UID)); !named(s, string(p1.UID)) {
		t.Errorf("the counted pod is no longer named in shard %s (%s)", s.Shard, s.Members)
	}
	var cm corev1.ConfigMap
	if err := base.Get(ctx, client.ObjectKey{Namespace: "shop", Name: policyconfig.BudgetConfigMapName("checkout")}, &cm); err != nil {
		t.Fatal(err)
	}
	c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
	if err != nil {
		t.Fatal(err)
	}
	if c.Consumers.Count != 1 {
		t.Errorf("count %d, want 1", c.Consumers.Count)
	}
}
