package webhooks_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/webhooks"
)

// teamUser is a client acting as an ordinary user who may only write
// RetryPolicies in namespace ns, through a Role, as a tenant is given.
func teamUser(ns, user string) client.Client {
	GinkgoHelper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "retrypolicy-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1.GroupVersion.Group}, Resources: []string{"retrypolicies"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}}}
	Expect(k8s.Create(ctx, role)).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "retrypolicy-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// A refusal names only what the request referenced (docs/security.md, what
// a refusal names): the policy, its namespace's policies, its parentRef.
var _ = Describe("What a refusal names", func() {
	It("tells a team-a user of its chain through team-b and team-c nothing of team-c's policy", func() {
		teamA, teamB, teamC := newNamespace(), newNamespace(), newNamespace()
		create(policyIn(teamC, "sms-2fa-dispatch", "telephony-api", 3, critical, allowing(v1.NamespacesFromAll, nil)))
		create(policyIn(teamB, "workflow", "workflow", 1, fixtures.ParentIn(teamC, "sms-2fa-dispatch"), allowing(v1.NamespacesFromAll, nil)))
		alice := teamUser(teamA, "alice")

		err := alice.Create(ctx, policyIn(teamA, "connector", "connector", 3, parentIn(teamB, "workflow")))
		refused(err, "spec.maxAttempts", "ERR_LAYER_AMPLIFICATION",
			fmt.Sprintf("1 layer in another namespace (×3) × %s/workflow(1) × %s/connector(3) = 9 > 3", teamB, teamA),
			fmt.Sprintf("(1 policy in another namespace → %s/workflow → %s/connector)", teamB, teamA))
		for _, secret := range []string{teamC, "sms-2fa-dispatch", "telephony-api", "Critical"} {
			Expect(err.Error()).NotTo(ContainSubstring(secret), "the refusal names team-c's %q", secret)
		}
	})
})

// The manager's validator reads children in place from the informer's
// store and bounds concurrent reviews (docs/webhooks.md, bounded work); it
// judges as a validator that lists them through the cache does.
var _ = Describe("Bounded admission work", func() {
	It("reaches the listing path's verdicts, reading children in place", func() {
		gw, pay := newNamespace(), newNamespace()
		root := policyIn(gw, "root", "root", 1, allowing(v1.NamespacesFromAll, nil))
		create(root)
		for i := range 20 {
			create(policyIn([]string{gw, pay}[i%2], fmt.Sprintf("child-%d", i), "child", 1, parentIn(gw, "root")))
		}
		create(policyIn(pay, "leaf", "leaf", 3, parentIn(pay, "child-1")))
		indexed, err := webhooks.NewRetryPolicyValidator(ctx, mgr.GetCache(), policygraph.DefaultLimits())
		Expect(err).NotTo(HaveOccurred())
		listed := &webhooks.RetryPolicyValidator{Reader: mgr.GetCache(), Limits: policygraph.DefaultLimits()}

		raised := root.DeepCopy()
		raised.Spec.MaxAttempts = 2
		closed := root.DeepCopy()
		closed.Spec.Layer.AllowedChildren = nil
		for _, p := range []*v1.RetryPolicy{root, raised, closed,
			policyIn(pay, "new", "new", 3, parentIn(pay, "child-3")), policyIn(pay, "deep", "deep", 1, parentIn(pay, "leaf"))} {
			wantWarn, wantErr := listed.ValidateUpdate(ctx, p, p)
			gotWarn, gotErr := indexed.ValidateUpdate(ctx, p, p)
			Expect(gotWarn).To(Equal(wantWarn), p.Name)
			Expect(fmt.Sprint(gotErr)).To(Equal(fmt.Sprint(wantErr)), p.Name)
		}
		_, err = indexed.ValidateUpdate(ctx, raised, raised)
		Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("%s/root(2) × 2 layers in other namespaces (×3) = 6 > 3", gw))))
	})
})
