package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/hack/publish"
	"github.com/retryguard/retryguard/test/e2e/internal/policyview"
)

// The manager's leader election, as internal/manager configures it (controller-runtime's
// defaults for the durations).
const (
	leaderLease   = controllers.LeaderElectionID
	leaseDuration = 15 * time.Second
	retryPeriod   = 2 * time.Second
)

// timings are the measured figures, written to $RETRYGUARD_E2E_TIMINGS for
// docs/benchmarks.md.
var timings sync.Map

func record(name string, d time.Duration) {
	timings.Store(name, d)
	AddReportEntry(name, d.Round(time.Millisecond).String())
	logf("%s: %s", name, d.Round(time.Millisecond))
}

var _ = AfterSuite(func() {
	path := os.Getenv("RETRYGUARD_E2E_TIMINGS")
	if path == "" {
		return
	}
	var b strings.Builder
	timings.Range(func(k, v any) bool {
		fmt.Fprintf(&b, "%s\t%s\n", k, v.(time.Duration).Round(time.Millisecond))
		return true
	})
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
})

func sample(name string) string         { return filepath.Join(repoRoot, "config", "samples", name) }
func unsafe(name string) string         { return filepath.Join(repoRoot, "hack", "demo", "unsafe", name) }
func svcURL(svc *corev1.Service) string { return "http://" + svc.Spec.ClusterIP }

// upgradedLimits are the limits the helm upgrade spec sets; every later
// upgrade keeps them, so that the Deployment does not roll back.
var upgradedLimits = map[string]any{"maxLeafAttempts": 3, "maxRetryPercent": 30}

// admissionRefusal is the webhook's answer to a budget above the platform cap
// (25% against the chart's default maxRetryPercent of 10), asked as a dry run.
func admissionRefusal(ctx context.Context) error {
	objs, err := readObjects(unsafe("07-greedy-budget.yaml"))
	if err != nil {
		return err
	}
	o := objs[0]
	o.SetNamespace(appNamespace)
	return k8s.Create(ctx, o, client.DryRunAll)
}

var _ = Describe("Retryguard installed from its chart", Ordered, Label("e2e"), func() {
	var vendorSvc, informerSvc, volumeSvc *corev1.Service

	// make fleet-drill runs these two specs and the fleet drill alone (label "install").
	It("publishes the release to the node's registry, signed, with SBOMs; cosign verifies each image, its SBOM and the chart, "+
		"and refuses a tampered tag", Label("install"), func(ctx SpecContext) { publishAndVerifySpec(ctx) }, NodeTimeout(5*time.Minute))

	It("installs with Helm from oci://: 2 replicas become Ready, pull the verified image from the registry, and one holds the leader lease",
		Label("install"), func(ctx SpecContext) {
			start := time.Now()
			rel, err := helmInstall(ctx)
			Expect(err).NotTo(HaveOccurred())
			record("helm install (wait)", time.Since(start))
			Expect(rel.Info.Status.String()).To(Equal("deployed"))

			dep := managerDeployment(ctx)
			Expect(dep.Status.ReadyReplicas).To(BeEquivalentTo(2))
			Expect(rel.Chart.Metadata.Version).To(Equal(chartVersion))
			var pods corev1.PodList
			Expect(k8s.List(ctx, &pods, client.InNamespace(releaseNamespace), client.MatchingLabels{"app.kubernetes.io/instance": releaseName})).
				To(Succeed())
			Expect(pods.Items).To(HaveLen(2))
			for i := range pods.Items {
				expectPulledFromRegistry(&pods.Items[i], map[string]publish.Artifact{dep.Spec.Template.Spec.Containers[0].Name: managerImage})
			}
			Eventually(func(g Gomega) {
				holder := leaseHolder(ctx, g)
				g.Expect(managerPodNames(ctx, g)).To(ContainElement(holder))
			}).WithContext(ctx).WithTimeout(leaseDuration + 2*retryPeriod).Should(Succeed())
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNamespace}})).To(Succeed())
			// Ready pods are not yet a reachable Service: kube-proxy programs
			// the endpoints up to a second later. The webhook answers then.
			Eventually(admissionRefusal).WithContext(ctx).WithPolling(200 * time.Millisecond).WithTimeout(time.Minute).
				Should(MatchError(ContainSubstring("ERR_BUDGET_ABOVE_PLATFORM_CAP")))
			record("helm install to admission answering", time.Since(start))
		}, NodeTimeout(6*time.Minute))

	It("passes kubectl retryguard check: CRDs, the webhook answering with a valid CA, the admission policy, a fresh leader lease", func(ctx SpecContext) {
		// The plugin as a user builds it, found by kubectl on PATH.
		bin := GinkgoT().TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "kubectl-retryguard"), "./cmd/kubectl-retryguard")
		build.Dir = repoRoot
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		check := exec.CommandContext(ctx, "kubectl", "retryguard", "check", "--kubeconfig", node.Kubeconfig, "-n", appNamespace)
		check.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err = check.CombinedOutput()
		logf("kubectl retryguard check:\n%s", out)
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		Expect(lines).To(HaveLen(6))
		for _, l := range lines {
			Expect(l).To(HavePrefix("ok "))
		}
		Expect(string(out)).To(ContainSubstring("Lease " + releaseNamespace + "/" + leaderLease + " held by"))
	}, NodeTimeout(4*time.Minute))

	It("refuses INC-2901 in the CRD and unsafe cross-object policies through the webhook Service", func(ctx SpecContext) {
		err := create(ctx, unsafe("01-inc-2901-immediate-retries.yaml"), appNamespace)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(string("ERR_RETRY_LIMIT_EXCEEDED")))
		Expect(err.Error()).To(ContainSubstring(string("ERR_JITTER_REQUIRED")))

		for _, s := range []string{"policy_v1alpha1_retrybudget.yaml", "policy_v1alpha1_retrybudget_marketing.yaml",
			"policy_v1alpha1_retrypolicy.yaml", "policy_v1alpha1_retrypolicy_marketing.yaml"} {
			Expect(create(ctx, sample(s), appNamespace)).To(Succeed(), s)
		}
		// Only the webhook can refuse these: each is valid on its own.
		for file, code := range map[string]string{
			"07-greedy-budget.yaml":         "ERR_BUDGET_ABOVE_PLATFORM_CAP",
			"06-marketing-on-2fa-pool.yaml": "ERR_SHARED_FAILURE_DOMAIN_LEAK",
		} {
			err := create(ctx, unsafe(file), appNamespace)
			Expect(err).To(HaveOccurred(), file)
			Expect(err.Error()).To(ContainSubstring("admission webhook"), file)
			Expect(err.Error()).To(ContainSubstring("denied the request"), file)
			Expect(err.Error()).To(ContainSubstring(code), file)
		}
	}, NodeTimeout(2*time.Minute))

	It("makes the samples Ready and publishes each policy to its ConfigMap", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			var policies policyv1alpha1.RetryPolicyList
			g.Expect(k8s.List(ctx, &policies, client.InNamespace(appNamespace))).To(Succeed())
			g.Expect(policies.Items).To(HaveLen(2))
			for _, p := range policies.Items {
				g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, policyv1alpha1.ConditionReady)).To(BeTrue(), p.Name)
				var cm corev1.ConfigMap
				g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: policyconfig.ConfigMapName(p.Name)}, &cm)).To(Succeed())
				payload, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(payload.Policy.Name).To(Equal(p.Name))
			}
			var budgets policyv1alpha1.RetryBudgetList
			g.Expect(k8s.List(ctx, &budgets, client.InNamespace(appNamespace))).To(Succeed())
			g.Expect(budgets.Items).To(HaveLen(2))
			for _, b := range budgets.Items {
				g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, policyv1alpha1.ConditionReady)).To(BeTrue(), b.Name)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, NodeTimeout(2*time.Minute))

	It("runs the vendor and two applications: one with the informer under the app Role, one with the mounted ConfigMap", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "smsapp", Namespace: appNamespace}})).To(Succeed())
		roles := appRole()
		if _, err := os.Stat(sample("app-rbac.yaml")); err == nil {
			logf("using the documented app Role from config/samples/app-rbac.yaml")
			objs, err := readObjects(sample("app-rbac.yaml"))
			Expect(err).NotTo(HaveOccurred())
			roles = nil
			for _, o := range objs {
				o.SetNamespace(appNamespace)
				roles = append(roles, o)
			}
		}
		for _, r := range roles {
			Expect(k8s.Create(ctx, r)).To(Succeed())
			if r.GetObjectKind().GroupVersionKind().Kind == "Role" || isRole(r) {
				Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "smsapp-" + r.GetName(), Namespace: appNamespace},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.GetName()},
					Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "smsapp", Namespace: appNamespace}},
				})).To(Succeed())
			}
		}
		start := time.Now()
		dep, svc := vendor()
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		Expect(k8s.Create(ctx, dep)).To(Succeed())
		vendorSvc = svc
		informerDep, iSvc := smsapp("smsapp-informer", "informer", svcURL(vendorSvc))
		volumeDep, vSvc := smsapp("smsapp-volume", "files", svcURL(vendorSvc))
		for _, o := range []client.Object{iSvc, vSvc, informerDep, volumeDep} {
			Expect(k8s.Create(ctx, o)).To(Succeed())
		}
		informerSvc, volumeSvc = iSvc, vSvc
		for _, name := range []string{"vendor", "smsapp-informer", "smsapp-volume"} {
			Eventually(func(g Gomega) {
				var d appsv1.Deployment
				g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: name}, &d)).To(Succeed())
				g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1), name)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		}
		// kube-proxy programs a Service's endpoints up to a second after
		// they change: wait until each answers through its ClusterIP.
		for _, svc := range []*corev1.Service{vendorSvc, informerSvc, volumeSvc} {
			Eventually(func() error {
				return call(ctx, "GET", svcURL(svc)+"/healthz", nil, nil)
			}).WithContext(ctx).WithPolling(200*time.Millisecond).WithTimeout(time.Minute).Should(Succeed(), svc.Name)
		}
		record("application pods Ready", time.Since(start))
	}, NodeTimeout(3*time.Minute))

	// enforce drives one application through the story and returns what the
	// vendor saw.
	storm := func(ctx context.Context, base, app, user string, script []int) (SendResult, []Attempt) {
		GinkgoHelper()
		// Ordinary traffic first: the budget allows retries as a share of
		// recent primaries. An empty script also drops what a previous
		// storm left unused.
		Expect(call(ctx, "PUT", svcURL(vendorSvc)+"/script", []int{}, nil)).To(Succeed())
		for i := range 30 {
			var r SendResult
			Expect(call(ctx, "POST", fmt.Sprintf("%s?user=warm%d&session=w", sendURL(base, app), i), nil, &r)).To(Succeed())
			if r.Status != 201 {
				var seen []Attempt
				_ = call(ctx, "GET", svcURL(vendorSvc)+"/attempts", nil, &seen)
				Fail(fmt.Sprintf("warm-up call %d: %+v; the vendor saw %+v", i, r, seen))
			}
		}
		Expect(call(ctx, "PUT", svcURL(vendorSvc)+"/script", script, nil)).To(Succeed())
		var r SendResult
		Expect(call(ctx, "POST", fmt.Sprintf("%s?user=%s&session=s-9", sendURL(base, app), user), nil, &r)).To(Succeed())
		var seen []Attempt
		Expect(call(ctx, "GET", svcURL(vendorSvc)+"/attempts", nil, &seen)).To(Succeed())
		return r, seen
	}

	expectStorm := func(r SendResult, seen []Attempt, user string, attempts int) {
		GinkgoHelper()
		Expect(seen).To(HaveLen(attempts), "the vendor's log: %+v", seen)
		for _, a := range seen {
			Expect(a.Status).To(Equal(503))
			Expect(a.Key).To(Equal("SMS-2FA-"+user+"-s-9"), "every retry carries the first attempt's key")
		}
		Expect(r.Attempts).To(Equal(attempts), "%+v", r)
		Expect(r.Code).NotTo(BeEmpty(), "%+v", r)
	}

	It("enforces sms-2fa-dispatch in both applications: 3 attempts on a 503 storm, 1 on a 400, one key", func(ctx SpecContext) {
		for _, app := range []*corev1.Service{informerSvc, volumeSvc} {
			user := strings.TrimPrefix(app.Name, "smsapp-")
			r, seen := storm(ctx, svcURL(app), app.Name, user, []int{503, 503, 503, 503, 503})
			expectStorm(r, seen, user, 3)

			r, seen = storm(ctx, svcURL(app), app.Name, user+"-bad", []int{400})
			Expect(seen).To(HaveLen(1), "a 400 is never retried: %+v", seen)
			Expect(seen[0].Status).To(Equal(400))
			Expect(r.Status).To(Equal(400), "%+v", r)
		}
	}, NodeTimeout(2*time.Minute))

	It("governs a client that is not Go through the injected sidecar: busybox wget gets 3 attempts on a 503 storm, 1 on a 400, "+
		"one key, and a dead letter", func(ctx SpecContext) {
		anyLanguageSpec(ctx, vendorSvc, storm)
	}, NodeTimeout(4*time.Minute))

	It("tells busybox wget the truth through the injected sidecar: a TLS failure is a 502 and nothing was sent, a cut body is broken; "+
		"a private CA named by the pod is trusted, and another namespace cannot reach its letters",
		func(ctx SpecContext) { sidecarEdgesSpec(ctx, vendorSvc) }, NodeTimeout(4*time.Minute))

	It("delivers a policy update to the running pods (informer and mounted volume)", func(ctx SpecContext) {
		var p policyv1alpha1.RetryPolicy
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: "sms-2fa-dispatch"}, &p)).To(Succeed())
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.MaxAttempts = 2
		applied := time.Now()
		Expect(k8s.Patch(ctx, &p, patch)).To(Succeed())
		var wg sync.WaitGroup
		for _, app := range []*corev1.Service{informerSvc, volumeSvc} {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				Eventually(func(g Gomega) {
					var v policyview.View
					g.Expect(call(ctx, "GET", svcURL(app)+"/policy", nil, &v)).To(Succeed())
					g.Expect(v.MaxAttempts).To(BeEquivalentTo(2))
				}).WithContext(ctx).WithPolling(100 * time.Millisecond).WithTimeout(3 * time.Minute).Should(Succeed())
				record("policy apply-to-enforced, "+strings.TrimPrefix(app.Name, "smsapp-"), time.Since(applied))
			}()
		}
		wg.Wait()
		for _, app := range []*corev1.Service{informerSvc, volumeSvc} {
			user := strings.TrimPrefix(app.Name, "smsapp-") + "-updated"
			r, seen := storm(ctx, svcURL(app), app.Name, user, []int{503, 503, 503, 503, 503})
			expectStorm(r, seen, user, 2)
		}
	}, NodeTimeout(5*time.Minute))

	It("deletes a deleted policy's ConfigMap through the garbage collector", func(ctx SpecContext) {
		p := &policyv1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "marketing-campaign-notify"}}
		cmKey := types.NamespacedName{Namespace: appNamespace, Name: policyconfig.ConfigMapName(p.Name)}
		Expect(k8s.Get(ctx, cmKey, &corev1.ConfigMap{})).To(Succeed())
		start := time.Now()
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, cmKey, &corev1.ConfigMap{}))
		}).WithContext(ctx).WithPolling(100 * time.Millisecond).WithTimeout(30 * time.Second).Should(BeTrue())
		record("policy delete to ConfigMap gone (GC)", time.Since(start))
	}, NodeTimeout(time.Minute))

	It("holds a fleet budget across real pods: 4 pods share 8 retries/s at the vendor, where per-pod budgets let each take 8; "+
		"a pod started while the controller is stopped retries nothing until a count names it", func(ctx SpecContext) {
		fleetBudgetSpec(ctx, vendorSvc)
	}, NodeTimeout(10*time.Minute))

	It("gives the wget pod's sidecar its share of a fleet budget shared with a Go pod", func(ctx SpecContext) {
		anyLanguageFleetSpec(ctx, vendorSvc)
	}, NodeTimeout(5*time.Minute))

	It("runs the fleet drill: 20 client pods in two namespaces against a dependency that fails metastably; with Retryguard, retries stay "+
		"within 10% of primaries at the dependency and it is back under capacity within 2.5 s of each trigger's end",
		Label("fleet-drill"), func(ctx SpecContext) { fleetDrillSpec(ctx) }, NodeTimeout(30*time.Minute))

	It("fails over when the leader pod is killed: another replica reconciles within the lease duration, admission keeps answering", func(ctx SpecContext) {
		Expect(admissionRefusal(ctx)).To(MatchError(ContainSubstring("ERR_BUDGET_ABOVE_PLATFORM_CAP")))
		leader := leaseHolder(ctx, Default)

		probeCtx, stopProbe := context.WithCancel(ctx)
		var probes, failures int
		var failed []string
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			for probeCtx.Err() == nil {
				err := admissionRefusal(probeCtx)
				if probeCtx.Err() != nil {
					return
				}
				probes++
				if err == nil || !strings.Contains(err.Error(), "ERR_BUDGET_ABOVE_PLATFORM_CAP") {
					failures++
					failed = append(failed, fmt.Sprint(err))
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()

		killed := time.Now()
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: leader}})).To(Succeed())
		// A policy created after the kill is published only by a new leader.
		Expect(create(ctx, filepath.Join("testdata", "after-failover.yaml"), appNamespace)).To(Succeed(),
			"admission must keep answering while the leader pod terminates")
		// The killed replica renews the lease until its process exits; the
		// lease duration runs from its last renewal.
		var lastRenewal, acquired time.Time
		Eventually(func(g Gomega) {
			var lease coordinationv1.Lease
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: releaseNamespace, Name: leaderLease}, &lease)).To(Succeed())
			holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
			if holder == leader {
				if lease.Spec.RenewTime != nil {
					lastRenewal = lease.Spec.RenewTime.Time
				}
				g.Expect(holder).NotTo(Equal(leader))
			}
			if lease.Spec.AcquireTime != nil {
				acquired = lease.Spec.AcquireTime.Time // the new holder's
			}
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: policyconfig.ConfigMapName("sms-status-probe")}, &corev1.ConfigMap{})).
				To(Succeed())
		}).WithContext(ctx).WithPolling(100 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())
		published := time.Since(killed)
		Expect(lastRenewal).NotTo(BeZero())
		takeover := acquired.Sub(lastRenewal)
		record("leader: last renewal to new leader's acquisition", takeover)
		record("leader: pod deleted to a new policy published", published)
		// Keep probing while the Deployment replaces the killed pod.
		time.Sleep(5 * time.Second)
		stopProbe()
		<-probed
		logf("admission probes during the failover: %d, failed: %d %v", probes, failures, failed)
		Expect(failures).To(BeZero(), "admission stopped answering: %v", failed)
		Expect(probes).To(BeNumerically(">", 10))
		// client-go counts the lease duration from when a candidate observed
		// the last renewal, and a candidate looks every retryPeriod jittered
		// by up to 120%: it may see the last renewal one such wait late and
		// acquire one wait after expiry. Lease times are microseconds.
		maxRetryWait := retryPeriod * 22 / 10
		Expect(takeover).To(BeNumerically("<=", leaseDuration+2*maxRetryWait+time.Second))
	}, NodeTimeout(3*time.Minute))

	It("rolls the Deployment on helm upgrade with a changed value, and upgrades a changed CRD", func(ctx SpecContext) {
		before := managerDeployment(ctx)
		start := time.Now()
		// The next chart, as a release that changes a CRD ships it: the
		// published chart with a printer column added to the RetryPolicy CRD.
		rel, err := helmUpgradeChart(ctx, map[string]any{"limits": upgradedLimits}, addPolicyPrinterColumn)
		Expect(err).NotTo(HaveOccurred())
		record("helm upgrade (wait)", time.Since(start))
		Expect(rel.Version).To(Equal(2))
		after := managerDeployment(ctx)
		Expect(after.Generation).To(BeNumerically(">", before.Generation))
		Expect(after.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--max-retry-percent=30"))
		var crd apiextCRD
		Expect(k8s.Get(ctx, types.NamespacedName{Name: "retrypolicies.policy.retryguard.io"}, &crd)).To(Succeed())
		Expect(crd.Spec.Versions[0].AdditionalPrinterColumns).To(ContainElement(HaveField("Name", upgradeColumn)),
			"helm upgrade did not upgrade the RetryPolicy CRD")
		// The new pods enforce the new cap: 25% is now accepted.
		Eventually(func() error { return admissionRefusal(ctx) }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, NodeTimeout(6*time.Minute))

	It("opens the webhook port to the control plane only with the chart's NetworkPolicy on, and fails closed when the API server is shut out",
		func(ctx SpecContext) { networkPolicySpec(ctx) }, NodeTimeout(8*time.Minute))

	It("removes everything but the CRDs on helm uninstall", func(ctx SpecContext) {
		Expect(helmUninstall()).To(Succeed())
		sel := client.MatchingLabels{"app.kubernetes.io/instance": releaseName}
		for _, list := range []client.ObjectList{
			&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{}, &rbacv1.RoleList{},
			&rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{},
			&admissionList{}, &pdbList{}, &networkPolicyList{},
		} {
			Expect(k8s.List(ctx, list, sel)).To(Succeed())
			Expect(meta.LenList(list)).To(BeZero(), "%T left after uninstall", list)
		}
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(releaseNamespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		// Nor a Secret: the serving certificate (rendered by the chart or
		// issued by the manager) and Helm's release records go too. The
		// only one allowed is the stand-in's, which Helm never owned.
		var secrets corev1.SecretList
		Expect(k8s.List(ctx, &secrets, client.InNamespace(releaseNamespace))).To(Succeed())
		for _, s := range secrets.Items {
			if standIn == nil || s.Name != standIn.secretName {
				Fail(fmt.Sprintf("Secret %s/%s left after uninstall", s.Namespace, s.Name))
			}
		}
		for _, crd := range []string{"retrypolicies.policy.retryguard.io", "retrybudgets.policy.retryguard.io"} {
			Expect(k8s.Get(ctx, types.NamespacedName{Name: crd}, &apiextCRD{})).To(Succeed(), crd)
		}
	}, NodeTimeout(3*time.Minute))
})

func managerDeployment(ctx context.Context) *appsv1.Deployment {
	GinkgoHelper()
	var list appsv1.DeploymentList
	Expect(k8s.List(ctx, &list, client.InNamespace(releaseNamespace), client.MatchingLabels{"app.kubernetes.io/instance": releaseName})).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

func managerPodNames(ctx context.Context, g Gomega) []string {
	var pods corev1.PodList
	g.Expect(k8s.List(ctx, &pods, client.InNamespace(releaseNamespace), client.MatchingLabels{"app.kubernetes.io/instance": releaseName})).To(Succeed())
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// leaseHolder is the pod holding the leader lease (controller-runtime's
// identity is <pod>_<uuid>).
func leaseHolder(ctx context.Context, g Gomega) string {
	var lease coordinationv1.Lease
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: releaseNamespace, Name: leaderLease}, &lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod
}

func isRole(o client.Object) bool {
	_, ok := o.(*rbacv1.Role)
	return ok
}
