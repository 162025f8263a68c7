package e2e

import (
	"context"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/hack/e2e/cluster"
)

// The webhookFrom values the NetworkPolicy spec installs: the API server's
// address (the node's, where it runs), and a peer that excludes it
// (TEST-NET-1, which nothing on the node uses).
var (
	fromAPIServer = []any{map[string]any{"ipBlock": map[string]any{"cidr": cluster.NodeIP + "/32"}}}
	fromNobody    = []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.0.2.0/24"}}}
)

// networkPolicySpec holds issue 21's first measure against callers of the
// webhook other than the API server (docs/security.md, who may reach the
// webhook) on the real node, whose enforcer is kube-router's firewall:
//
//  1. Without the chart's NetworkPolicy a tenant's pod reaches the webhook
//     port (the control: what the policy must close is open).
//  2. With it on and webhookFrom the API server's address, the same pod
//     cannot connect, through the Service or to a pod, while the webhook still
//     judges every write the API server sends it.
//  3. With webhookFrom a peer that excludes the API server, the tenant's pod
//     is still shut out. kube-router admits a node's own traffic to its pods
//     whatever the policy says, so an API server on the webhook's node still
//     reaches it (the case docs/security.md tells the reader to check). Where
//     the port is closed to the API server (another enforcer, or an API
//     server off the node; here a host rule stands in), every write is
//     refused, never admitted: failurePolicy Fail.
//
// The release is put back to webhookFrom the API server's address after.
func networkPolicySpec(ctx context.Context) {
	GinkgoHelper()
	probe := deployNetprobe(ctx, appNamespace)
	targets := webhookTargets(ctx)
	logf("webhook targets: %v", targets)

	By("without the NetworkPolicy, a tenant's pod reaches the webhook port")
	for _, t := range targets {
		Eventually(func() Dial { return dialFrom(ctx, probe, t) }).WithContext(ctx).WithTimeout(time.Minute).
			Should(HaveField("Connected", BeTrue()), t)
	}

	By("with webhookFrom the API server's address, the pod is shut out and admission still works")
	start := time.Now()
	upgradeNetworkPolicy(ctx, fromAPIServer)
	expectShutOut(ctx, probe, targets)
	record("NetworkPolicy: helm upgrade to the webhook port closed", time.Since(start))
	expectWebhookJudges(ctx)

	By("with webhookFrom a peer that excludes the API server, the pod is still shut out")
	upgradeNetworkPolicy(ctx, fromNobody)
	expectShutOut(ctx, probe, targets)
	// kube-router's own rule admits the node's traffic to local pods.
	expectWebhookJudges(ctx)

	By("with the webhook port closed to the API server, every write is refused: admission fails closed")
	dropped := closeWebhookPortToNode(targets)
	DeferCleanup(dropped)
	policy := probePolicy("netpol-fail-closed")
	err := k8s.Create(ctx, policy)
	Expect(err).To(HaveOccurred(), "a write admitted without the webhook's judgement")
	Expect(err.Error()).To(ContainSubstring("failed calling webhook"))
	Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(policy), &policyv1alpha1.RetryPolicy{}))).
		To(BeTrue(), "the refused policy was stored")
	dropped()

	By("put back to webhookFrom the API server's address: the same write is admitted")
	upgradeNetworkPolicy(ctx, fromAPIServer)
	expectShutOut(ctx, probe, targets)
	Eventually(func() error { return k8s.Create(ctx, probePolicy("netpol-fail-closed")) }).WithContext(ctx).
		WithTimeout(time.Minute).Should(Succeed())
	Expect(k8s.Delete(ctx, probePolicy("netpol-fail-closed"))).To(Succeed())
}

// upgradeNetworkPolicy turns the chart's NetworkPolicy on with webhookFrom,
// keeping the limits of the earlier upgrade (a NetworkPolicy does not roll
// the Deployment).
func upgradeNetworkPolicy(ctx context.Context, from []any) {
	GinkgoHelper()
	_, err := helmUpgrade(ctx, map[string]any{
		"limits":        upgradedLimits,
		"networkPolicy": map[string]any{"enabled": true, "webhookFrom": from},
	})
	Expect(err).NotTo(HaveOccurred())
}

// expectShutOut waits for the enforcer to close every target to the probe,
// then checks each once more.
func expectShutOut(ctx context.Context, probe *corev1.Service, targets []string) {
	GinkgoHelper()
	for _, t := range targets {
		Eventually(func() Dial { return dialFrom(ctx, probe, t) }).WithContext(ctx).WithTimeout(time.Minute).
			Should(HaveField("Connected", BeFalse()), t)
	}
	for _, t := range targets {
		d := dialFrom(ctx, probe, t)
		Expect(d.Connected).To(BeFalse(), t)
		logf("netprobe -> %s: %s", t, d.Error)
	}
}

// expectWebhookJudges asks the webhook, through the API server, for one
// refusal only it can give and one acceptance (dry runs).
func expectWebhookJudges(ctx context.Context) {
	GinkgoHelper()
	err := create(ctx, unsafe("06-marketing-on-2fa-pool.yaml"), appNamespace, client.DryRunAll)
	Expect(err).To(HaveOccurred())
	Expect(err.Error()).To(ContainSubstring("denied the request"))
	Expect(err.Error()).To(ContainSubstring("ERR_SHARED_FAILURE_DOMAIN_LEAK"))
	Expect(k8s.Create(ctx, probePolicy("netpol-dry-run"), client.DryRunAll)).To(Succeed())
}

// probePolicy is a valid RetryPolicy (testdata/after-failover.yaml) named name.
func probePolicy(name string) client.Object {
	GinkgoHelper()
	objs, err := readObjects(filepath.Join("testdata", "after-failover.yaml"))
	Expect(err).NotTo(HaveOccurred())
	o := objs[0]
	o.SetNamespace(appNamespace)
	o.SetName(name)
	return o
}

// closeWebhookPortToNode drops the node's packets to the webhook's pods on
// the host, after kube-router's filter rules (mangle POSTROUTING sees the
// Service already translated to a pod). It returns the undo, safe to call
// twice.
func closeWebhookPortToNode(targets []string) func() {
	GinkgoHelper()
	var rules [][]string
	for _, t := range targets {
		host, port, err := net.SplitHostPort(t)
		Expect(err).NotTo(HaveOccurred())
		if ip := net.ParseIP(host); ip == nil || !podNetwork.Contains(ip) {
			continue // the Service: translated before POSTROUTING
		}
		rules = append(rules, []string{"POSTROUTING", "-s", cluster.NodeIP, "-d", host, "-p", "tcp", "--dport", port, "-j", "DROP"})
	}
	Expect(rules).NotTo(BeEmpty())
	for _, r := range rules {
		out, err := exec.Command("iptables", append([]string{"-t", "mangle", "-I"}, r...)...).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
	}
	undone := false
	return func() {
		if undone {
			return
		}
		undone = true
		for _, r := range rules {
			if out, err := exec.Command("iptables", append([]string{"-t", "mangle", "-D"}, r...)...).CombinedOutput(); err != nil {
				logf("iptables -D %v: %v: %s", r, err, out)
			}
		}
	}
}

var podNetwork = func() *net.IPNet {
	_, n, _ := net.ParseCIDR(cluster.PodCIDR)
	return n
}()

// webhookTargets are the webhook's Service and each manager pod's webhook
// port, as host:port.
func webhookTargets(ctx context.Context) []string {
	GinkgoHelper()
	var svcs corev1.ServiceList
	Expect(k8s.List(ctx, &svcs, client.InNamespace(releaseNamespace), client.MatchingLabels{"app.kubernetes.io/instance": releaseName})).To(Succeed())
	var targets []string
	for _, s := range svcs.Items {
		for _, p := range s.Spec.Ports {
			if p.Name == "webhook" {
				targets = append(targets, net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(releaseNamespace), client.MatchingLabels{"app.kubernetes.io/instance": releaseName})).To(Succeed())
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == "webhook" {
					targets = append(targets, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.ContainerPort))))
				}
			}
		}
	}
	Expect(len(targets)).To(BeNumerically(">=", 2), "the webhook's Service and at least one pod")
	return targets
}

// Dial mirrors netprobe's /dial answer.
type Dial struct {
	Connected bool   `json:"connected"`
	Error     string `json:"error"`
}

func dialFrom(ctx context.Context, probe *corev1.Service, addr string) Dial {
	GinkgoHelper()
	var d Dial
	Expect(call(ctx, "GET", svcURL(probe)+"/dial?addr="+url.QueryEscape(addr), nil, &d)).To(Succeed())
	return d
}

// deployNetprobe runs a tenant's pod in namespace ns (no NetworkPolicy of
// its own) and waits until it answers through its Service.
func deployNetprobe(ctx context.Context, ns string) *corev1.Service {
	GinkgoHelper()
	labels := map[string]string{"app": "netprobe"}
	dep := deployment("netprobe", labels, corev1.PodSpec{
		SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
		AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{
			Name: "netprobe", Image: netprobeImage, ImagePullPolicy: corev1.PullNever,
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: readyOnHealthz(),
		}},
	})
	svc := service("netprobe", labels)
	dep.Namespace, svc.Namespace = ns, ns
	Expect(k8s.Create(ctx, svc)).To(Succeed())
	Expect(k8s.Create(ctx, dep)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		for _, o := range []client.Object{dep, svc} {
			if err := k8s.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				logf("deleting %s: %v", o.GetName(), err)
			}
		}
	})
	Eventually(func(g Gomega) {
		var d appsv1.Deployment
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "netprobe"}, &d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	Eventually(func() error { return call(ctx, "GET", svcURL(svc)+"/healthz", nil, nil) }).WithContext(ctx).
		WithPolling(200 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())
	return svc
}
