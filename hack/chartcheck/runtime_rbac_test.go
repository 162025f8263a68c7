package chartcheck

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/hack/devenv"
	"github.com/retryguard/retryguard/runtime/policyconfig"
	"github.com/retryguard/retryguard/runtime/watch"
)

// An application pod with only config/samples/app-rbac.yaml (bound to its
// ServiceAccount in its namespace) runs the informer watcher: it syncs,
// and serves the policy the operator publishes.
func TestAppRBACRunsTheWatcher(t *testing.T) {
	env, cfg, admin := startEnv(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const app = "shop"
	createNamespace(ctx, t, admin, app)
	rbac := loadObjects(t, "config/samples/app-rbac.yaml")
	for _, o := range rbac {
		o["metadata"].(object)["namespace"] = app
		if subjects, ok := o["subjects"].([]any); ok {
			subjects[0].(object)["namespace"] = app
		}
	}
	create(ctx, t, admin, rbac...)

	user, groups := serviceAccountUser(app, "my-app")
	cs, err := kubernetes.NewForConfig(impersonating(cfg, user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	w := watch.NewInformer(cs, app)
	startCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := w.Start(startCtx); err != nil {
		t.Fatalf("the watcher does not start with app-rbac.yaml: %v", err)
	}

	// Publish as the operator would (here as the admin).
	_, done, err := devenv.StartManaged(ctx, env, cfg, policygraph.DefaultLimits(), devenv.Features{Controllers: true})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(ctx, t, admin, fixtures.Budget(app, fixtures.DefaultBudget, 10))
	mustCreate(ctx, t, admin, fixtures.Policy(app, "job", "job", 3))
	eventually(t, 30*time.Second, "the watcher serves the published policy", func() bool {
		p, ok := w.Policy("job")
		return ok && p.Policy.Name == "job"
	})
	// The pod's rights end at its namespace.
	if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the app reads ConfigMaps outside its namespace")
	}
	if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: policyconfig.ConfigMapName("x")}}, metav1.CreateOptions{}); err == nil {
		t.Fatal("the app writes ConfigMaps")
	}
	cancel()
	<-done
}
