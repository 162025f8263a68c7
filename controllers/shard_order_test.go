package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
)

// orderingClient applies through to the API server and records, in
// order, what each apply wrote: "count" or the shard's members.
type orderingClient struct {
	client.Client
	mu     sync.Mutex
	writes []string
}

func (c *orderingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	cm := obj.(*corev1ac.ConfigMapApplyConfiguration)
	c.mu.Lock()
	if _, ok := cm.Data[policyconfig.CountDataKey]; ok {
		c.writes = append(c.writes, "count")
	} else {
		s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
		if err != nil {
			c.mu.Unlock()
			return err
		}
		c.writes = append(c.writes, fmt.Sprintf("shard %s gen %d %s", s.Shard, s.Generation, s.Members))
	}
	c.mu.Unlock()
	return c.Client.Apply(ctx, obj, opts...)
}

// The delivery bound holds across the count and its shards: a shard that
// loses members is written before the count, keeping its generation; one
// that gains members after it, at the count's generation; a shard whose
// members stay is not written at all.
func TestShardsAreWrittenAroundTheCount(t *testing.T) {
	env, base, b := startFleetBudget(t, "shop", "checkout", "checkout")
	ctx := t.Context()
	// Pods of three shards: leaving (x), staying (y), joining (z); and a
	// shard that both loses and gains (w1 out, w2 in).
	pick := func(prefix string, avoid ...string) (string, string) {
		for i := 0; ; i++ {
			uid := fmt.Sprintf("%s-%d", prefix, i)
			if s := policyconfig.ShardOf(uid); !strings.Contains(strings.Join(avoid, ","), s) {
				return uid, s
			}
		}
	}
	x, sx := pick("x")
	y, sy := pick("y", sx)
	z, sz := pick("z", sx, sy)
	w1, sw := pick("w", sx, sy, sz)
	var w2 string
	for i := 100; ; i++ {
		if u := fmt.Sprintf("w-%d", i); policyconfig.ShardOf(u) == sw && u != w1 {
			w2 = u
			break
		}
	}
	shard := func(s string, gen int64, uids ...string) *policyconfig.MemberShard {
		return &policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion, Namespace: "shop", Budget: "checkout",
			UID: string(b.UID), Shard: s, Generation: gen, Members: policyconfig.EncodeMembers(uids)}
	}
	live := map[string]*policyconfig.MemberShard{sx: shard(sx, 3, x), sy: shard(sy, 2, y), sw: shard(sw, 3, w1)}
	oc := &orderingClient{Client: base}
	r := &controllers.RetryBudgetReconciler{Client: oc, Scheme: env.Scheme, Limits: policygraph.DefaultLimits()}
	counted := []string{y, z, w2}
	inForce := policyconfig.Consumers{Count: 3, ObservedAt: time.Now().UTC().Truncate(time.Second), Members: policyconfig.EncodeMembers(counted)}
	if err := r.PublishMembers(ctx, b, live, counted, inForce, 4); err != nil {
		t.Fatal(err)
	}
	count := -1
	for i, w := range oc.writes {
		if w == "count" {
			count = i
		}
	}
	want := map[string]bool{
		fmt.Sprintf("shard %s gen 3 ", sx):                                             false, // emptied, before the count, its generation kept
		fmt.Sprintf("shard %s gen 3 ", sw):                                             false, // w1 removed first
		fmt.Sprintf("shard %s gen 4 %s", sz, policyconfig.EncodeMembers([]string{z})):  true,  // z added after
		fmt.Sprintf("shard %s gen 4 %s", sw, policyconfig.EncodeMembers([]string{w2})): true,  // then w2
	}
	if count < 0 || len(oc.writes) != len(want)+1 {
		t.Fatalf("writes %q: want one count and %d shard writes", oc.writes, len(want))
	}
	for i, w := range oc.writes {
		if i == count {
			continue
		}
		after, ok := want[w]
		if !ok {
			t.Errorf("unexpected write %q (all: %q)", w, oc.writes)
			continue
		}
		if after != (i > count) {
			t.Errorf("%q written at %d, the count at %d: removals go before the count, additions after", w, i, count)
		}
		if strings.Contains(w, " "+sy+" ") {
			t.Errorf("the unchanged shard %s was written", sy)
		}
	}
}
