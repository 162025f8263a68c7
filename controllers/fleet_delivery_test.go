package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	rfixtures "github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// noPolicies is a client without the manager's policy index: the budget
// has no policy (the count's publication reads none).
type noPolicies struct{ client.Client }

func (c noPolicies) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*v1.RetryPolicyList); ok {
		return nil
	}
	return c.Client.List(ctx, l, opts...)
}

// countingBody counts the bytes a pod's client reads from the API server.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingConfig is cfg with every response body counted in n.
func countingConfig(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if resp != nil && resp.Body != nil {
				resp.Body = countingBody{resp.Body, n}
			}
			return resp, err
		})
	}
	return c
}

// fleetDelivery is what one fleet size measured.
type fleetDelivery struct {
	pods int
	// perRefresh is the bytes each observed pod's informers read per
	// renewal of an unchanged count.
	perRefresh float64
	// countObject and shardObject are the count's and one shard's
	// ConfigMaps as the API server serves (and etcd stores) them.
	countObject, shardObject, shardMembers int
}

// measureFleetDelivery counts pods pod objects for a fleet budget with the
// budget's real reconciler (on a fake clock, writing to the API server),
// starts the runtime's real informer for observed of them, and measures
// what they read while the count is renewed refreshes times.
func measureFleetDelivery(t *testing.T, c client.Client, cfg *rest.Config, pods, observed, refreshes int) fleetDelivery {
	t.Helper()
	ctx := t.Context()
	ns := fmt.Sprintf("fleet-%d", pods)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	b := fleetBudget(ns, "vendor", "sender", 1000)
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	var uids []string
	for i := range pods {
		p := newPod(ns, fmt.Sprintf("sender-%04d", i), "sender")
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(p.UID))
	}
	fake := clock.NewFake(time.Now().UTC())
	r := &controllers.RetryBudgetReconciler{Client: noPolicies{c}, Scheme: c.Scheme(), Limits: policygraph.DefaultLimits(), Clock: fake}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	// A policy of the budget, as the policy controller publishes it: the
	// count is joined to it, and read through it.
	p := rfixtures.Fleet()
	p.Policy.Namespace, p.Policy.Name, p.Budget.Name, p.Budget.UID, p.Budget.Counted, p.Budget.Consumers = ns, "send", "vendor", string(b.UID), true, nil
	raw, err := policyconfig.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policyconfig.ConfigMapName("send"),
			Labels: map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: "send"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.OwnerKind, Name: "send",
				UID: types.UID("uid-send"), Controller: ptr.To(true)}}},
		Data: map[string]string{policyconfig.DataKey: string(raw)},
	}); err != nil {
		t.Fatal(err)
	}
	read := make([]*atomic.Int64, observed)
	watchers := make([]*informer.Informer, observed)
	for i := range observed {
		read[i] = new(atomic.Int64)
		cs, err := kubernetes.NewForConfig(countingConfig(cfg, read[i]))
		if err != nil {
			t.Fatal(err)
		}
		w := informer.New(cs, ns)
		w.Logger, w.PodUID = slog.New(slog.DiscardHandler), uids[i*pods/observed]
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		watchers[i] = w
	}
	served := func(i int) *policyconfig.Consumers {
		if p, ok := watchers[i].Policy("send"); ok && p.Budget != nil {
			return p.Budget.Consumers
		}
		return nil
	}
	awaitAll := func(what string, ok func(*policyconfig.Consumers, string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := range observed {
			for !ok(served(i), watchers[i].PodUID) {
				if time.Now().After(deadline) {
					t.Fatalf("%d pods: %s: pod %d serves %+v", pods, what, i, served(i))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	awaitAll("every observed pod named", func(c *policyconfig.Consumers, uid string) bool {
		return c != nil && c.Count == int32(pods) && c.Includes(uid)
	})
	time.Sleep(time.Second) // the initial lists and the first events are read
	before := make([]int64, observed)
	for i := range observed {
		before[i] = read[i].Load()
	}
	for range refreshes {
		fake.Advance(policyconfig.ConsumerCountRefresh)
		reconcile()
		at := fake.Now().Truncate(0)
		awaitAll("the renewed count", func(c *policyconfig.Consumers, uid string) bool {
			return c != nil && c.ObservedAt.Equal(at) && c.Includes(uid)
		})
	}
	time.Sleep(200 * time.Millisecond)
	var total int64
	for i := range observed {
		total += read[i].Load() - before[i]
	}
	out := fleetDelivery{pods: pods, perRefresh: float64(total) / float64(observed*refreshes)}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.BudgetConfigMapName("vendor")}, &cm); err != nil {
		t.Fatal(err)
	}
	out.countObject = jsonSize(t, &cm)
	shard := policyconfig.ShardOf(uids[0])
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyconfig.MemberShardConfigMapName(shard, "vendor")}, &cm); err != nil {
		t.Fatal(err)
	}
	s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
	if err != nil {
		t.Fatal(err)
	}
	out.shardObject, out.shardMembers = jsonSize(t, &cm), len(s.Members)
	return out
}

func jsonSize(t *testing.T, v any) int {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

// What a pod receives to hold its share of a fleet budget is the same
// size however large the fleet: with 10 and with 1,000 consumers, the real
// budget reconciler renewing the count and the runtime's real informers
// reading it through the API server, each pod reads the same bytes per
// renewal, at most 1 KB. The test prints, from these measured sizes, the
// model of docs/benchmarks.md ("Fleet budgets at 10,000 pods"):
//
//	go test -run TestFleetDeliveryPerPodIsTheSameAtAnyFleetSize -v ./controllers/
func TestFleetDeliveryPerPodIsTheSameAtAnyFleetSize(t *testing.T) {
	env, cfg := testenv.StartEnvironment(t, false)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	small := measureFleetDelivery(t, c, cfg, 10, 10, 3)
	large := measureFleetDelivery(t, c, cfg, 1000, 10, 3)
	for _, m := range []fleetDelivery{small, large} {
		t.Logf("%5d consumers: %.0f B per pod per refresh; count object %d B; a shard of %d members' bytes: %d B",
			m.pods, m.perRefresh, m.countObject, m.shardMembers, m.shardObject)
		if m.perRefresh > 1024 {
			t.Errorf("%d consumers: %.0f B per pod per refresh, above 1 KB", m.pods, m.perRefresh)
		}
	}
	// The count's digits grow with the fleet (10 → 1000): a few bytes.
	if d := math.Abs(large.perRefresh - small.perRefresh); d > 16 {
		t.Errorf("per pod per refresh: %.0f B with 10 consumers, %.0f B with 1,000: it grows with the fleet", small.perRefresh, large.perRefresh)
	}
	t.Log("\n" + fleetModel(large))
}

// fleetModel is docs/benchmarks.md's table: API-server egress and etcd
// writes at 100, 1,000 and 10,000 consumer pods with 1 pod/s churn (one pod
// replaced a second), from the measured sizes, for the sharded members and
// for the members in the count (every change and renewal sending the whole
// list to every pod, 10.67 bytes a pod).
func fleetModel(m fleetDelivery) string {
	const churn = 1.0 // pods replaced a second
	perMember := 4.0 / 3 * 8
	shardBase := float64(m.shardObject - m.shardMembers)
	var b strings.Builder
	fmt.Fprintln(&b, "| consumers | per pod per refresh | count object | count writes/min | shard writes/min | etcd writes/min | egress | "+
		"members in the count: per pod per refresh, count object, egress |")
	fmt.Fprintln(&b, "|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, n := range []float64{100, 1000, 10000} {
		spacing := min(n*0.002, policyconfig.ConsumerCountRefresh.Seconds())
		counts := max(min(churn, 1/spacing), 1/policyconfig.ConsumerCountRefresh.Seconds()) // publications a second
		shards := 2 * churn                                                                 // a removal and an addition
		shard := shardBase + perMember*n/policyconfig.MemberShards
		egress := n*m.perRefresh*counts + shards*(n/policyconfig.MemberShards)*shard + counts*float64(m.countObject) + shards*shard
		oldEvent := m.perRefresh + perMember*n
		oldEgress := n * oldEvent * max(churn, 1/policyconfig.ConsumerCountRefresh.Seconds())
		fmt.Fprintf(&b, "| %s | %.0f B | %.1f KB | %.0f | %.0f | %.0f | %s | %s, %.1f KB, %s |\n", thousands(n), m.perRefresh,
			float64(m.countObject)/1000, 60*counts, 60*shards, 60*(counts+shards), rate(egress),
			bytesOf(oldEvent), (float64(m.countObject)+perMember*n)/1000, rate(oldEgress))
	}
	return b.String()
}

func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func bytesOf(n float64) string {
	if n < 1000 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f KB", n/1000)
}

func rate(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB/s", n/1e6)
	default:
		return fmt.Sprintf("%.0f KB/s", n/1e3)
	}
}
