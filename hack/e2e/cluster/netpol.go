package cluster

import (
	"context"
	"os/exec"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubeRouterUser is the enforcer's identity (its client certificate's CN).
const kubeRouterUser = "system:kube-router"

// kubeRouterForwardChain is the filter chain kube-router's firewall jumps to
// from FORWARD; it exists once the controller has synced.
const kubeRouterForwardChain = "KUBE-ROUTER-FORWARD"

// kubeRouterRules are what the firewall reads: the pods, namespaces and
// NetworkPolicies it enforces, the node it runs on, and the Services and
// endpoints its informer factory also starts. It writes nothing.
var kubeRouterRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods", "namespaces", "services", "endpoints"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
}

// startNetworkPolicy runs kube-router's network-policy controller on the node
// as a host process, with its router and service proxy off: kube-proxy keeps
// the Services and the bridge CNI the pods' network, so only the firewall
// (iptables chains and ipsets per pod and policy) is kube-router's. Without
// it the bridge enforces no NetworkPolicy.
func (c *Cluster) startNetworkPolicy(ctx context.Context) error {
	if c.opts.NetworkPolicyAssets == "" {
		c.logf("no NetworkPolicy enforcer: NetworkPolicies change nothing on this node")
		return nil
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kubeRouterUser}, Rules: kubeRouterRules}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeRouterUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeRouterUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: kubeRouterUser}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = c.start("kube-router", filepath.Join(c.opts.NetworkPolicyAssets, "kube-router"),
		"--kubeconfig="+c.path("kube-router.kubeconfig"),
		"--hostname-override="+NodeName,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--service-cluster-ip-range="+ServiceCIDR,
		// No listeners on the host: the health and metrics ports are off.
		"--health-port=0", "--metrics-port=0",
		"--v=1")
	return err
}

// waitNetworkPolicy waits for the enforcer's first sync: its FORWARD chain.
func (c *Cluster) waitNetworkPolicy(ctx context.Context) error {
	if c.opts.NetworkPolicyAssets == "" {
		return nil
	}
	return c.poll(ctx, "kube-router to install its firewall chains", 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := exec.CommandContext(ctx, "iptables", "-t", "filter", "-S", kubeRouterForwardChain).Run()
		return err == nil, err
	})
}
