package testenv_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// up starts the local cluster as `make dev-cluster` does, stopped when tb
// ends, and a client of it.
func up(ctx context.Context, tb testing.TB) (*testenv.Cluster, client.Client) {
	tb.Helper()
	ctrl.SetLogger(logr.Discard())
	cluster, err := testenv.Up(ctx, filepath.Join(tb.TempDir(), "kubeconfig"), policygraph.DefaultLimits())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			tb.Error(err)
		}
	})
	c, err := client.New(cluster.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		tb.Fatal(err)
	}
	return cluster, c
}

// The local cluster (`make dev-cluster`, `make demo`) runs the garbage
// collector and the namespace controller, so deleting behaves as it does in
// a real cluster: a deleted policy's published ConfigMap goes within
// testenv.CollectionDeadline (docs/configmap-format.md promises that it is
// garbage-collected), and a deleted
// namespace terminates, its contents removed, and disappears.
func TestClusterCollectsGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, c := up(ctx, t)

	t.Run("a deleted policy's ConfigMap", func(t *testing.T) {
		budget := testenv.Sample[v1.RetryBudget](t, "policy_v1alpha1_retrybudget.yaml")
		policy := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
		for _, o := range []client.Object{budget, policy} {
			o.SetNamespace(metav1.NamespaceDefault)
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			if err := testenv.Settle(ctx, cluster.Manager); err != nil {
				t.Fatal(err)
			}
		}
		if err := testenv.Converged(ctx, cluster.Manager); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: policy.Namespace, Name: policyconfig.ConfigMapName(policy.Name)}}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatalf("the policy was not published: %v", err)
		}
		if err := c.Delete(ctx, policy); err != nil {
			t.Fatal(err)
		}
		took, err := testenv.Gone(ctx, c, cm, testenv.CollectionDeadline)
		if err != nil {
			t.Fatalf("the ConfigMap of the deleted policy %s is still there after %s: %v", policy.Name, took.Round(time.Millisecond), err)
		}
		t.Logf("the ConfigMap was collected %s after the policy's deletion", took.Round(time.Millisecond))
	})

	t.Run("a deleted namespace", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-leaving"}}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		content := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "left-behind"}}
		if err := c.Create(ctx, content); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			t.Errorf("the deleted namespace is %s, want Terminating", ns.Status.Phase)
		}
		took, err := testenv.Gone(ctx, c, ns, 30*time.Second)
		if err != nil {
			t.Fatalf("the deleted namespace %s is still there after %s (phase %s, finalizers %v): %v",
				ns.Name, took.Round(time.Millisecond), ns.Status.Phase, ns.Spec.Finalizers, err)
		}
		t.Logf("the namespace terminated and disappeared in %s", took.Round(time.Millisecond))
		if err := c.Get(ctx, client.ObjectKeyFromObject(content), content); !apierrors.IsNotFound(err) {
			t.Errorf("the deleted namespace's ConfigMap: %v, want NotFound", err)
		}
	})
}

// BenchmarkConfigMapCollection measures, in the local cluster, the time from
// deleting a published RetryPolicy to its ConfigMap being gone: the garbage
// collector's latency that CollectionDeadline bounds. Publishing each policy
// is outside the timer.
//
//	go test -run '^$' -bench BenchmarkConfigMapCollection -benchtime 20x ./internal/testenv/
func BenchmarkConfigMapCollection(b *testing.B) {
	ctx := context.Background()
	cluster, c := up(ctx, b)
	budget := testenv.Sample[v1.RetryBudget](b, "policy_v1alpha1_retrybudget.yaml")
	template := testenv.Sample[v1.RetryPolicy](b, "policy_v1alpha1_retrypolicy.yaml")
	budget.Namespace = metav1.NamespaceDefault
	if err := c.Create(ctx, budget); err != nil {
		b.Fatal(err)
	}
	if err := testenv.Settle(ctx, cluster.Manager); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		policy := template.DeepCopy()
		policy.Namespace = metav1.NamespaceDefault
		if err := c.Create(ctx, policy); err != nil {
			b.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: policy.Namespace, Name: policyconfig.ConfigMapName(policy.Name)}}
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return c.Get(ctx, client.ObjectKeyFromObject(cm), cm) == nil, nil
		}); err != nil {
			b.Fatalf("the policy was not published: %v", err)
		}
		b.StartTimer()
		if err := c.Delete(ctx, policy); err != nil {
			b.Fatal(err)
		}
		if _, err := testenv.Gone(ctx, c, cm, testenv.CollectionDeadline); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		// The policy itself must be gone before it is created again.
		if _, err := testenv.Gone(ctx, c, policy, testenv.CollectionDeadline); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
