package e2e

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/test/e2e/internal/policyview"
)

// The fleet budget's objects (testdata/fleet-budget.yaml) and the pods that
// share it.
const (
	fleetBudget   = "fleet-vendor"
	fleetPolicy   = "fleet-dispatch"
	fleetApp      = "smsapp-fleet"
	fleetReplicas = 4
	// fleetAllowance is the budget's maxRetriesPerSecond, and
	// fleetPartitions its partitions: twice the pods.
	fleetAllowance  = 8
	fleetPartitions = 8
)

// The load driven through every fleet pod: fleetWorkers senders per pod,
// each sending once per fleetSendEvery, for fleetLoadFor. Every send fails
// (the vendor answers 503) and asks the budget for up to two retries: 20 to
// 40 asks a second per pod, several times the whole allowance.
const (
	fleetWorkers   = 4
	fleetSendEvery = 200 * time.Millisecond
	fleetLoadFor   = 10 * time.Second
)

// FleetAttempt is the vendor's log entry with its arrival and whether its
// key was seen before.
type FleetAttempt struct {
	Attempt
	At    time.Time `json:"at"`
	Retry bool      `json:"retry"`
}

// retryRate is what the vendor saw of one load: the retries that arrived in
// each whole second of the vendor's clock inside the load.
type retryRate struct {
	perSecond []int
	primaries int
}

func (r retryRate) max() int {
	m := 0
	for _, n := range r.perSecond {
		m = max(m, n)
	}
	return m
}

func (r retryRate) mean() float64 {
	total := 0
	for _, n := range r.perSecond {
		total += n
	}
	return float64(total) / float64(len(r.perSecond))
}

func (r retryRate) String() string {
	return fmt.Sprintf("retries/s max %d, mean %.1f over %d s %v (%d primaries)", r.max(), r.mean(), len(r.perSecond), r.perSecond, r.primaries)
}

// loadStartWithin is how far into a second of the node's clock a load may
// begin. The vendor bins retries by their arrival, which trails their grant
// by a backoff and the hops (tens of milliseconds on a loaded node), and
// every pod spends its share of a second as soon as the load starts: a load
// begun in the last of those milliseconds of a second has each pod's grants
// of that second arrive in the next, on top of that second's own. So it
// was in a run whose load began 26 ms before a second: the pods granted 8
// in each of their seconds, and the vendor saw [16 0 8 8 8 8 8 8 8]
// (TestFleetRatesCountEachSecondsGrantsOnce).
const loadStartWithin = 100 * time.Millisecond

// untilLoadStart is how long a load that may begin at now waits: not at all
// within the first loadStartWithin of a second, otherwise until the next
// second begins.
func untilLoadStart(now time.Time) time.Duration {
	sec := now.Truncate(time.Second)
	if now.Sub(sec) < loadStartWithin {
		return 0
	}
	return sec.Add(time.Second).Sub(now)
}

// ratesOf bins the retries among attempts by the whole second of their
// arrival, from the second the load began in, at from (it holds no attempt
// before the load: the vendor's log was cleared, and the previous load's
// sends had all returned), to the last one that ends before to. Counting
// the load's first second holds the pods' fresh shares, spent at once, to
// the allowance too.
func ratesOf(attempts []FleetAttempt, from, to time.Time) retryRate {
	first, last := from.Truncate(time.Second), to.Truncate(time.Second)
	var r retryRate
	r.perSecond = make([]int, int(last.Sub(first)/time.Second))
	for _, a := range attempts {
		if !a.Retry {
			r.primaries++
			continue
		}
		if a.At.Before(first) || !a.At.Before(last) {
			continue
		}
		r.perSecond[int(a.At.Sub(first)/time.Second)]++
	}
	return r
}

// fleetPods are the fleet's Ready pods' /policy URLs by pod name.
func fleetPods(ctx context.Context, g Gomega) map[string]string {
	var pods corev1.PodList
	g.Expect(k8s.List(ctx, &pods, client.InNamespace(appNamespace), client.MatchingLabels{"app": fleetApp})).To(Succeed())
	urls := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				urls[p.Name] = "http://" + p.Status.PodIP + ":8080"
			}
		}
	}
	return urls
}

// awaitShares waits until every pod's runtime divides the budget over want
// pods, consumers being the count its payload must carry (nil: none).
func awaitShares(ctx context.Context, pods map[string]string, consumers *int32, want int64) {
	GinkgoHelper()
	for name, url := range pods {
		awaitShare(ctx, name, url+"/policy", fleetBudget, consumers, want)
	}
}

// awaitShare waits until the pod's view of budget at policyURL (smsapp's
// /policy, or the sidecar's /policies/<name>) divides by want pods.
func awaitShare(ctx context.Context, name, policyURL, budget string, consumers *int32, want int64) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var v policyview.View
		g.Expect(call(ctx, "GET", policyURL, nil, &v)).To(Succeed())
		g.Expect(v.Found).To(BeTrue())
		g.Expect(v.Budget).NotTo(BeNil())
		g.Expect(v.Budget.Name).To(Equal(budget))
		if consumers == nil {
			g.Expect(v.Budget.Consumers).To(BeNil())
		} else {
			g.Expect(v.Budget.Consumers).To(HaveValue(Equal(*consumers)))
		}
		g.Expect(v.Budget.Denominator).To(Equal(want), "%s: %+v", name, v.Budget)
	}).WithContext(ctx).WithPolling(250*time.Millisecond).WithTimeout(time.Minute).Should(Succeed(), name)
}

// driveFleet sends fleetWorkers streams of SMS through each pod for
// fleetLoadFor while the vendor answers every attempt with 503, and returns
// the retries the vendor saw per second.
func driveFleet(ctx context.Context, vendorURL string, pods map[string]string, phase, title string) retryRate {
	GinkgoHelper()
	Expect(call(ctx, "PUT", vendorURL+"/script?then=503", []int{}, nil)).To(Succeed())
	var wg sync.WaitGroup
	var sends, failed atomic.Int64
	var mu sync.Mutex
	var firstErr error
	for d := untilLoadStart(time.Now()); d > 0; d = untilLoadStart(time.Now()) {
		time.Sleep(d)
	}
	start := time.Now()
	end := start.Add(fleetLoadFor)
	for name, url := range pods {
		for w := range fleetWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(fleetSendEvery)
				defer tick.Stop()
				for i := 0; time.Now().Before(end); i++ {
					var r SendResult
					err := call(ctx, "POST", fmt.Sprintf("%s/send?user=%s-%s-%d-%d&session=f", url, phase, name, w, i), nil, &r)
					sends.Add(1)
					if err == nil && r.Status == 201 {
						err = fmt.Errorf("a send succeeded while the vendor answers 503: %+v", r)
					}
					if err != nil {
						failed.Add(1)
						mu.Lock()
						firstErr = cmp.Or(firstErr, err)
						mu.Unlock()
					}
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
		}
	}
	wg.Wait()
	stop := time.Now()
	Expect(failed.Load()).To(BeZero(), "%d of %d sends failed; the first: %v", failed.Load(), sends.Load(), firstErr)
	var seen []FleetAttempt
	Expect(call(ctx, "GET", vendorURL+"/attempts", nil, &seen)).To(Succeed())
	r := ratesOf(seen, start, stop)
	logf("fleet budget, %s: %d sends through %d pods; the vendor saw %s", title, sends.Load(), len(pods), r)
	AddReportEntry("fleet budget, "+title, r.String())
	return r
}

// fleetBudgetSpec proves a fleet budget on real pods: fleetReplicas smsapp
// pods share one maxRetriesPerSecond, and the retries that reach the vendor
// stay within it every second, and come close to it (each pod's share is the
// allowance over the count, not over partitions). The same pods under the
// same load, under per-pod budgets (no consumers, partitions 1), each take
// the whole allowance and together exceed it: what a runtime that ignored
// partitioning would do in the first half.
// expectShardedCount checks the publication a pod reads: the count names
// no pod itself, and the shards of its members, each of the budget's
// generation or an earlier one, name every fleet pod in its own shard.
func expectShardedCount(ctx context.Context) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var cm corev1.ConfigMap
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: policyconfig.BudgetConfigMapName(fleetBudget)}, &cm)).To(Succeed())
		c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.MembersGeneration).To(BeNumerically(">", 0))
		g.Expect(c.Consumers.Members).To(BeEmpty(), "the count carries its members")
		var cms corev1.ConfigMapList
		g.Expect(k8s.List(ctx, &cms, client.InNamespace(appNamespace), client.MatchingLabels{policyconfig.MembersLabel: fleetBudget})).To(Succeed())
		shards := map[string]*policyconfig.MemberShard{}
		for _, cm := range cms.Items {
			s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
			g.Expect(err).NotTo(HaveOccurred(), cm.Name)
			g.Expect(cm.Labels).To(HaveKeyWithValue(policyconfig.ShardLabel, s.Shard))
			shards[s.Shard] = s
		}
		var list corev1.PodList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(appNamespace), client.MatchingLabels{"app": fleetApp})).To(Succeed())
		for _, p := range list.Items {
			uid := string(p.UID)
			g.Expect(c.WithShards(shards[policyconfig.ShardOf(uid)]).Consumers.Includes(uid)).To(BeTrue(), "pod %s in its shard", p.Name)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

func fleetBudgetSpec(ctx context.Context, vendorSvc *corev1.Service) {
	Expect(create(ctx, filepath.Join("testdata", "fleet-budget.yaml"), appNamespace)).To(Succeed())
	dep, _ := smsapp(fleetApp, "informer", svcURL(vendorSvc))
	dep.Spec.Replicas = ptr.To[int32](fleetReplicas)
	dep.Spec.Template.Spec.Containers[0].Env = append(dep.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "POLICY", Value: fleetPolicy})
	DeferCleanup(func(ctx SpecContext) {
		// Nothing of the fleet stays for the later specs: its pods, its
		// objects, and the vendor's 503s.
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, dep))).To(Succeed())
		for _, o := range []client.Object{
			&policyv1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: fleetPolicy}},
			&policyv1alpha1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: fleetBudget}},
		} {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed())
		}
		Expect(call(ctx, "PUT", svcURL(vendorSvc)+"/script", []int{}, nil)).To(Succeed())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(appNamespace), client.MatchingLabels{"app": fleetApp})).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: fleetBudget}, &policyv1alpha1.RetryBudget{}))).To(BeTrue())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, NodeTimeout(2*time.Minute))
	Expect(k8s.Create(ctx, dep)).To(Succeed())

	start := time.Now()
	Eventually(func(g Gomega) {
		var d appsv1.Deployment
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(dep), &d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(fleetReplicas))
		var b policyv1alpha1.RetryBudget
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: fleetBudget}, &b)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, policyv1alpha1.ConditionReady)).To(BeTrue(), "%+v", b.Status.Conditions)
		g.Expect(b.Status.Consumers).To(HaveValue(BeEquivalentTo(fleetReplicas)))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	var pods map[string]string
	Eventually(func(g Gomega) {
		pods = fleetPods(ctx, g)
		g.Expect(pods).To(HaveLen(fleetReplicas))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	// Each pod retries only once a count taken after it started covers it:
	// the runtime's own Denominator, read through /policy, says when.
	awaitShares(ctx, pods, ptr.To[int32](fleetReplicas), fleetReplicas)
	record("fleet budget: pods created to every pod's share covered", time.Since(start))
	expectShardedCount(ctx)

	fleet := driveFleet(ctx, svcURL(vendorSvc), pods, "fleet", "shared by 4 pods")
	lateJoinerSpec(ctx, vendorSvc, dep, pods)
	Eventually(func(g Gomega) {
		pods = fleetPods(ctx, g)
		g.Expect(pods).To(HaveLen(fleetReplicas))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// Per-pod budgets: the same budget without consumers, over one
	// partition, so each pod enforces the whole allowance.
	Eventually(func() error {
		var b policyv1alpha1.RetryBudget
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: fleetBudget}, &b); err != nil {
			return err
		}
		b.Spec.Consumers, b.Spec.Partitions = nil, ptr.To[int32](1)
		return k8s.Update(ctx, &b)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	awaitShares(ctx, pods, nil, 1)
	perPod := driveFleet(ctx, svcURL(vendorSvc), pods, "perpod", "per-pod budgets")

	// The pods and the vendor share one node, so one clock: the vendor's
	// seconds are the pods' seconds. A retry arrives a backoff (at most
	// 20 ms) and the hops after its budget granted it, so one granted at
	// the end of a second can land in the next: the load begins at the
	// start of a second (untilLoadStart), where every pod spends its share
	// at once, and one retry of skew a second is allowed for the rest.
	Expect(fleet.perSecond).NotTo(BeEmpty())
	Expect(fleet.max()).To(BeNumerically("<=", fleetAllowance+1), "shared by %d pods: %s", fleetReplicas, fleet)
	Expect(fleet.mean()).To(BeNumerically("<=", fleetAllowance+0.5), "shared by %d pods: %s", fleetReplicas, fleet)
	// Each pod's share is the allowance over the count: a runtime that
	// divided it over partitions instead would give the fleet half of it.
	overPartitions := float64(fleetAllowance) * fleetReplicas / fleetPartitions
	Expect(fleet.mean()).To(BeNumerically(">", overPartitions+1), "shared by %d pods: %s", fleetReplicas, fleet)
	// Under the same load, per-pod budgets let the fleet exceed the
	// allowance: the bound above is the fleet budget's doing. Each pod's
	// floor grants its whole allowance only while its window holds fewer
	// primaries than its start credit (docs/runtime.md, the floor); past
	// them its 10% ratio rules, so the excess is in the first seconds and
	// the mean over the run stays above the fleet's bound.
	Expect(perPod.max()).To(BeNumerically(">", 2*fleetAllowance), "per pod: %s", perPod)
	Expect(perPod.mean()).To(BeNumerically(">", fleetAllowance+1), "per pod: %s", perPod)
}

// lateJoinerSpec: a pod that starts while the controller is stopped is named
// by no count, so it grants no retry (its share is zero, however the last
// count ages), until the controller is back and a count names it; then it
// takes its share of the allowance. The fleet is back at fleetReplicas pods
// when it returns.
func lateJoinerSpec(ctx context.Context, vendorSvc *corev1.Service, dep *appsv1.Deployment, pods map[string]string) {
	GinkgoHelper()
	restore := stopManager(ctx)
	scaleFleet(ctx, dep, fleetReplicas+1)
	var late, lateURL string
	Eventually(func(g Gomega) {
		all := fleetPods(ctx, g)
		g.Expect(all).To(HaveLen(fleetReplicas + 1))
		for name, url := range all {
			if _, old := pods[name]; !old {
				late, lateURL = name, url
			}
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	var v policyview.View
	Expect(call(ctx, "GET", lateURL+"/policy", nil, &v)).To(Succeed())
	Expect(v.Budget).NotTo(BeNil())
	Expect(v.Budget.Named).To(BeFalse(), "%s, started with the controller stopped: %+v", late, v.Budget)
	Expect(v.Budget.Denominator).To(BeZero(), "%s: %+v", late, v.Budget)
	alone := driveFleet(ctx, svcURL(vendorSvc), map[string]string{late: lateURL}, "late", "a pod started with the controller stopped")
	Expect(alone.perSecond).NotTo(BeEmpty())
	Expect(alone.max()).To(BeZero(), "a pod no count names retried: %s", alone)

	restore()
	all := map[string]string{}
	Eventually(func(g Gomega) { all = fleetPods(ctx, g); g.Expect(all).To(HaveLen(fleetReplicas + 1)) }).WithContext(ctx).Should(Succeed())
	start := time.Now()
	awaitShares(ctx, all, ptr.To[int32](fleetReplicas+1), fleetReplicas+1)
	record("fleet budget: controller back to a late pod's share", time.Since(start))
	named := driveFleet(ctx, svcURL(vendorSvc), map[string]string{late: lateURL}, "named", "the late pod, once a count names it")
	Expect(named.max()).To(BeNumerically(">=", 1), "the late pod, named: %s", named)
	Expect(named.max()).To(BeNumerically("<=", fleetAllowance/(fleetReplicas+1)+1), "the late pod, named: %s", named)
	scaleFleet(ctx, dep, fleetReplicas)
}

// stopManager scales the manager to no replicas and waits until none runs;
// the function it returns scales it back and waits until it is Ready.
func stopManager(ctx context.Context) func() {
	GinkgoHelper()
	mgr := managerDeployment(ctx)
	replicas := ptr.Deref(mgr.Spec.Replicas, 1)
	scale := func(n int32) {
		GinkgoHelper()
		Eventually(func() error {
			d := managerDeployment(ctx)
			before := d.DeepCopy()
			d.Spec.Replicas = ptr.To(n)
			return k8s.Patch(ctx, d, client.MergeFrom(before))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
	scale(0)
	Eventually(func(g Gomega) { g.Expect(managerPodNames(ctx, g)).To(BeEmpty()) }).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	logf("the manager is stopped (%d replicas before)", replicas)
	return func() {
		GinkgoHelper()
		scale(replicas)
		Eventually(func(g Gomega) {
			d := managerDeployment(ctx)
			g.Expect(d.Status.ReadyReplicas).To(Equal(replicas))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	}
}

// scaleFleet sets the fleet Deployment's replicas.
func scaleFleet(ctx context.Context, dep *appsv1.Deployment, n int32) {
	GinkgoHelper()
	Eventually(func() error {
		var d appsv1.Deployment
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			return err
		}
		before := d.DeepCopy()
		d.Spec.Replicas = ptr.To(n)
		return k8s.Patch(ctx, &d, client.MergeFrom(before))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
