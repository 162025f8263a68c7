package chartcheck

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// dropRuleEnv names one rule to leave out, as kind/name/index, for checking
// by hand that the suite fails without it:
//
//	CHARTCHECK_DROP_RULE=ClusterRole/rg-retryguard/0 go test -run TestChartRBAC .
const dropRuleEnv = "CHARTCHECK_DROP_RULE"

func dropRule(t *testing.T, objs []object) []object {
	spec := os.Getenv(dropRuleEnv)
	if spec == "" {
		return objs
	}
	for _, o := range objs {
		var i int
		if _, err := fmt.Sscanf(spec, o["kind"].(string)+"/"+o["metadata"].(object)["name"].(string)+"/%d", &i); err == nil {
			rules := o["rules"].([]any)
			t.Logf("without %s: %v", spec, rules[i])
			o["rules"] = slices.Delete(rules, i, i+1)
		}
	}
	return objs
}

// The manager runs as its ServiceAccount with exactly the RBAC the chart
// renders: every reconcile and webhook path works.
func TestChartRBACSuffices(t *testing.T) {
	byKind := mustTemplate(t)
	var rbac []object
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		rbac = append(rbac, byKind[k]...)
	}
	runAsServiceAccount(t, namespace, "rg-retryguard", dropRule(t, rbac))
}

// The same with config/rbac, as `make deploy` installs it.
func TestConfigRBACSuffices(t *testing.T) {
	var rbac []object
	for _, f := range []string{"service_account", "role", "role_binding", "leader_election_role", "leader_election_role_binding",
		"metrics_auth_role", "metrics_auth_role_binding", "metrics_reader_role"} {
		rbac = append(rbac, loadObjects(t, "config/rbac/"+f+".yaml")...)
	}
	runAsServiceAccount(t, "system", "controller-manager", dropRule(t, rbac))
}

// runAsServiceAccount installs rbac, runs the manager (controllers, webhooks,
// leader election, secure metrics) impersonating ns/sa, and walks every path.
func runAsServiceAccount(t *testing.T, ns, sa string, rbac []object) {
	env, cfg, admin := startEnv(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createNamespace(ctx, t, admin, ns)
	create(ctx, t, admin, rbac...)

	user, groups := serviceAccountUser(ns, sa)
	metricsAddr := freeAddr(t)
	mgr, done := startManagerAs(ctx, t, env, impersonating(cfg, user, groups...), ns, metricsAddr)

	// Leader election: a Lease held in the manager's namespace.
	eventually(t, 30*time.Second, "the Lease", func() bool {
		var lease coordinationv1.Lease
		return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "retryguard-manager.policy.retryguard.io"}, &lease) == nil &&
			lease.Spec.HolderIdentity != nil
	})

	// Webhooks: valid objects admitted, cross-object rules refused with
	// their codes (the validators list through the manager's cache).
	const app = "shop"
	createNamespace(ctx, t, admin, app)
	mustCreate(ctx, t, admin, fixtures.Budget(app, fixtures.DefaultBudget, 10))
	mustCreate(ctx, t, admin, fixtures.Policy(app, "job", "job", 3))
	mustCreate(ctx, t, admin, fixtures.Policy(app, "connector", "connector", 1, fixtures.Parent("job")))
	if err := testenv.Settle(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	refused(t, admin.Create(ctx, fixtures.Policy(app, "worker", "connector", 3, fixtures.Parent("job"))), codes.LayerAmplification)
	refused(t, admin.Create(ctx, fixtures.Budget(app, "greedy", 50)), codes.BudgetAbovePlatformCap)

	// Controllers: both policies Ready and published, the budget's status
	// written, a not-Ready policy reported by a Warning event.
	mustCreate(ctx, t, admin, fixtures.Policy(app, "orphan", "connector", 1, fixtures.BudgetRef("missing")))
	if err := testenv.Converged(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"job", "connector"} {
		var p v1.RetryPolicy
		if err := admin.Get(ctx, client.ObjectKey{Namespace: app, Name: name}, &p); err != nil ||
			!meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionReady) {
			t.Fatalf("policy %s not Ready: %v %v", name, err, p.Status.Conditions)
		}
	}
	var b v1.RetryBudget
	if err := admin.Get(ctx, client.ObjectKey{Namespace: app, Name: fixtures.DefaultBudget}, &b); err != nil || b.Status.ObservedGeneration != b.Generation {
		t.Fatalf("budget status not written: %v %+v", err, b.Status)
	}
	// A fleet budget's consumers are counted from the metadata-only pod
	// watch (pods: list and watch).
	fleet := fixtures.Budget(app, "fleet", 10)
	fleet.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
	mustCreate(ctx, t, admin, fleet)
	mustCreate(ctx, t, admin, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "shop-1", Labels: map[string]string{"app": "shop"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/shop"}}}})
	eventually(t, 30*time.Second, "the fleet budget's consumers counted", func() bool {
		return admin.Get(ctx, client.ObjectKeyFromObject(fleet), fleet) == nil && fleet.Status.Consumers != nil && *fleet.Status.Consumers == 1
	})
	// ... and published in the budget's own ConfigMap, owned by the budget
	// (retrybudgets/finalizers: update, for blockOwnerDeletion).
	var count corev1.ConfigMap
	if err := admin.Get(ctx, client.ObjectKey{Namespace: app, Name: policyconfig.BudgetConfigMapName("fleet")}, &count); err != nil ||
		metav1.GetControllerOf(&count) == nil || metav1.GetControllerOf(&count).UID != fleet.UID {
		t.Fatalf("the fleet budget's count is not published: %v %+v", err, count.ObjectMeta)
	}
	eventually(t, 30*time.Second, "a Warning event for the not-Ready policy", func() bool {
		var events eventsv1.EventList
		_ = admin.List(ctx, &events, client.InNamespace(app))
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool { return e.Regarding.Name == "orphan" && e.Type == corev1.EventTypeWarning })
	})

	// A hand-edited ConfigMap is repaired.
	key := client.ObjectKey{Namespace: app, Name: policyconfig.ConfigMapName("job")}
	var cm corev1.ConfigMap
	if err := admin.Get(ctx, key, &cm); err != nil {
		t.Fatal(err)
	}
	published := cm.Data[policyconfig.DataKey]
	cm.Data[policyconfig.DataKey] = `{"forged":true}`
	if err := admin.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the tampered ConfigMap repaired", func() bool {
		return admin.Get(ctx, key, &cm) == nil && cm.Data[policyconfig.DataKey] == published
	})

	// Metrics: a scraper bound to the metrics reader role is let in, which
	// takes the manager's TokenReviews and SubjectAccessReviews.
	token := scraperToken(ctx, t, admin, rbac)
	eventually(t, 30*time.Second, "an authorized scrape", func() bool {
		return scrape(metricsAddr, token) == http.StatusOK
	})

	// Leader election's own event, in the manager's namespace.
	eventually(t, 30*time.Second, "the leader election event", func() bool {
		var events corev1.EventList
		_ = admin.List(ctx, &events, client.InNamespace(ns))
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == "LeaderElection" })
	})

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the manager stopped with %v", err)
	}
}

// startManagerAs runs the manager cmd/manager runs (internal/manager), with
// cfg's identity, its metrics served securely at metricsAddr and a leader
// elected in ns, as a deployment runs it.
func startManagerAs(ctx context.Context, t *testing.T, env *envtest.Environment, cfg *rest.Config, ns, metricsAddr string) (ctrl.Manager, <-chan error) {
	t.Helper()
	c := testenv.ManagerConfig(env, policygraph.DefaultLimits(), testenv.Everything)
	c.MetricsAddr, c.MetricsSecure = metricsAddr, true
	c.LeaderElect, c.LeaderElectionNamespace = true, ns
	mgr, done, err := testenv.StartManager(ctx, env, cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	return mgr, done
}

func mustCreate(ctx context.Context, t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(ctx, o); err != nil {
		t.Fatalf("creating %s: %v", o.GetName(), err)
	}
}

func refused(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), string(code)) {
		t.Fatalf("want a refusal with %s, got %v", code, err)
	}
}

// scraperToken binds a new ServiceAccount to the metrics reader ClusterRole
// among rbac and returns a token for it.
func scraperToken(ctx context.Context, t *testing.T, c client.Client, rbac []object) string {
	t.Helper()
	reader := ""
	for _, o := range rbac {
		if name := o["metadata"].(object)["name"].(string); o["kind"] == "ClusterRole" && strings.HasSuffix(name, "metrics-reader") {
			reader = name
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "prometheus"}}
	mustCreate(ctx, t, c, sa)
	mustCreate(ctx, t, c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "prometheus"}},
	})
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func scrape(addr, token string) int {
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	// The metrics server's certificate is self-signed.
	insecure := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	} //nolint:gosec // see above
	res, err := insecure.Do(req)
	if err != nil {
		return 0
	}
	_ = res.Body.Close()
	return res.StatusCode
}
