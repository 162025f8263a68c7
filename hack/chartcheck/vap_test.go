package chartcheck

import (
	"context"
	"github.com/retryguard/retryguard/contract/codes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

var reservedCode = codes.PublishedConfigMapReserved.String()

// budgetLabel marks the ConfigMap a RetryBudget's fleet count is published
// in (retrybudget-<name>).
const budgetLabel = "policy.retryguard.io/budget"

// The chart's ValidatingAdmissionPolicy reserves the published ConfigMaps
// for the operator's ServiceAccount, while the garbage collector and the
// namespace controller can still delete them.
func TestChartAdmissionPolicyReservesPublishedConfigMaps(t *testing.T) {
	_, cfg, admin := startEnv(t, false)
	ctx := context.Background()
	byKind := mustTemplate(t)
	createNamespace(ctx, t, admin, namespace, "shop")
	create(ctx, t, admin, byKind["ServiceAccount"]...)
	create(ctx, t, admin, byName(byKind["ClusterRole"], "rg-retryguard"), byName(byKind["ClusterRoleBinding"], "rg-retryguard"))
	create(ctx, t, admin, byKind["ValidatingAdmissionPolicy"]...)
	create(ctx, t, admin, byKind["ValidatingAdmissionPolicyBinding"]...)
	// An ordinary user who may edit every ConfigMap of the namespace.
	mustCreate(ctx, t, admin, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "configmap-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{rbacv1.VerbAll}}},
	})
	mustCreate(ctx, t, admin, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "alice"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	})
	alice := as(t, impersonating(cfg, "alice"))
	eventually(t, 30*time.Second, "the policy in force", func() bool {
		err := alice.Create(ctx, configMap(policyconfig.ConfigMapName("probe"), nil))
		return err != nil && strings.Contains(err.Error(), reservedCode)
	})

	opUser, opGroups := serviceAccountUser(namespace, "rg-retryguard")
	operator := as(t, impersonating(cfg, opUser, opGroups...))
	gcUser, gcGroups := serviceAccountUser("kube-system", "generic-garbage-collector")
	gc := as(t, impersonating(cfg, gcUser, gcGroups...))
	nsUser, nsGroups := serviceAccountUser("kube-system", "namespace-controller")
	nsController := as(t, impersonating(cfg, nsUser, nsGroups...))
	managed := map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue}
	policyLabels := map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: "job"}
	budgetLabels := map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, budgetLabel: "fleet"}
	membersLabels := map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.MembersLabel: "fleet",
		policyconfig.ShardLabel: "3f"}

	// The operator publishes and republishes (a patch: it writes with
	// server-side apply, and its RBAC grants patch, not update).
	byNameCM := configMap(policyconfig.ConfigMapName("job"), policyLabels)
	byLabelCM := configMap("retrybudget-fleet", budgetLabels)
	shardCM := configMap(policyconfig.MemberShardConfigMapName("3f", "fleet"), membersLabels)
	// A shared budget's copies in a namespace it is shared with.
	countCopy := configMap(policyconfig.BudgetConfigMapNameIn("shop", "platform", "fleet"), budgetLabels)
	shardCopy := configMap(policyconfig.MemberShardConfigMapNameIn("shop", "3f", "platform", "fleet"), membersLabels)
	for _, cm := range []*corev1.ConfigMap{byNameCM, byLabelCM, shardCM, countCopy, shardCopy} {
		allowed(t, "the operator creates "+cm.Name, operator.Create(ctx, cm))
		before := cm.DeepCopy()
		cm.Data = map[string]string{"k": "v2"}
		allowed(t, "the operator patches "+cm.Name, operator.Patch(ctx, cm, client.MergeFrom(before)))
	}
	allowed(t, "alice writes her own ConfigMaps", alice.Create(ctx, configMap("settings", nil)))

	// The operator writes nothing else, though its RBAC would let it: a
	// stolen token cannot overwrite aws-auth or a tenant's ConfigMap.
	awsAuth := configMap("aws-auth", nil)
	awsAuth.Namespace = "kube-system"
	outOfScope(t, "the operator creates kube-system/aws-auth", operator.Create(ctx, awsAuth))
	settings := configMap("settings", nil)
	outOfScope(t, "the operator patches alice's ConfigMap",
		operator.Patch(ctx, settings, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"stolen"}}`))))
	outOfScope(t, "the operator labels alice's ConfigMap as its own",
		operator.Patch(ctx, settings, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"retryguard","policy.retryguard.io/policy":"settings"}}}`))))
	for name, labels := range map[string]map[string]string{
		"labelled":                             policyLabels, // a name it does not publish
		policyconfig.ConfigMapName("nolabel"):  managed,      // no policy label
		policyconfig.ConfigMapName("budgetcm"): budgetLabels, // a budget's label on a policy's name
		"retrybudget-policycm":                 policyLabels, // and the reverse
		"retrybudget-unmanaged":                {budgetLabel: "fleet"},
		"retrymembers-00-budgetcm":             budgetLabels,  // a budget's label on a shard's name
		"retrybudget-shardcm":                  membersLabels, // and the reverse
		"retrysharedmembers-00-platform.fleet": budgetLabels,  // a budget's label on a shard copy's name
		"retrysharedbudget-platform.fleet2":    membersLabels, // and the reverse
	} {
		outOfScope(t, "the operator creates "+name, operator.Create(ctx, configMap(name, labels)))
	}

	// Anyone else is refused, whether the name or the label (old or new) marks it.
	reserved(t, "alice creates a retrypolicy-* ConfigMap", alice.Create(ctx, configMap(policyconfig.ConfigMapName("forged"), nil)))
	reserved(t, "alice creates a labelled ConfigMap", alice.Create(ctx, configMap("forged", managed)))
	for _, cm := range []*corev1.ConfigMap{byNameCM, byLabelCM, shardCM, countCopy} {
		forged := cm.DeepCopy()
		forged.Data = map[string]string{"k": "forged"}
		reserved(t, "alice updates "+cm.Name, alice.Update(ctx, forged))
		unlabelled := cm.DeepCopy()
		unlabelled.Labels = nil
		reserved(t, "alice removes the label of "+cm.Name, alice.Update(ctx, unlabelled))
		reserved(t, "alice deletes "+cm.Name, alice.Delete(ctx, cm))
	}
	reserved(t, "alice squats a retrybudget-* name", alice.Create(ctx, configMap("retrybudget-squat", nil)))
	reserved(t, "alice squats a retrymembers-* name", alice.Create(ctx, configMap("retrymembers-00-squat", nil)))
	reserved(t, "alice squats a shared budget's copy", alice.Create(ctx, configMap("retrysharedbudget-platform.squat", nil)))
	allowed(t, "the operator deletes a stale copy", operator.Delete(ctx, shardCopy))
	gcWrites := byNameCM.DeepCopy()
	gcWrites.Data = map[string]string{"k": "by the garbage collector"}
	reserved(t, "the garbage collector updates", gc.Update(ctx, gcWrites))
	// Orphaning (kubectl delete --cascade=orphan): the garbage collector
	// removes the owner reference and nothing else; refused, the
	// RetryPolicy would stay Terminating with its orphan finalizer forever.
	owned := configMap(policyconfig.ConfigMapName("owned"), policyLabels)
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "policy.retryguard.io/v1alpha1", Kind: "RetryPolicy", Name: "owned", UID: "1234"}}
	allowed(t, "the operator creates "+owned.Name+" with its owner", operator.Create(ctx, owned))
	orphan := owned.DeepCopy()
	orphan.OwnerReferences = nil
	allowed(t, "the garbage collector orphans "+owned.Name, gc.Update(ctx, orphan))
	forgedByGC := orphan.DeepCopy()
	forgedByGC.Data = map[string]string{"k": "forged"}
	reserved(t, "the garbage collector changes the data", gc.Update(ctx, forgedByGC))
	relabelledByGC := orphan.DeepCopy()
	relabelledByGC.Labels = nil
	reserved(t, "the garbage collector removes a label", gc.Update(ctx, relabelledByGC))

	// Kubernetes' own cleanup still works.
	allowed(t, "the garbage collector deletes", gc.Delete(ctx, byNameCM))
	allowed(t, "the namespace controller deletes", nsController.Delete(ctx, byLabelCM))
	allowed(t, "the garbage collector deletes a shard", gc.Delete(ctx, shardCM))
}

func as(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func configMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: refused: %v", what, err)
	}
}

// outOfScope asserts the refusal of an operator's write outside what it publishes.
func outOfScope(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), reservedCode) || !strings.Contains(err.Error(), "operator writes only") {
		t.Errorf("%s: %v, want a refusal with %s naming what the operator may write", what, err, reservedCode)
	}
}

func reserved(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), reservedCode) {
		t.Errorf("%s: %v, want a refusal with %s", what, err, reservedCode)
	}
}
