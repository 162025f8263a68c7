package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/hack/drills/fleet"
	"github.com/retryguard/retryguard/hack/drills/fleet/clientstats"
	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/webhooks"
)

// The fleet drill's objects (testdata/fleet-drill.yaml, in each namespace,
// and its one budget, testdata/fleet-drill-budget.yaml, in the first) and pods.
const (
	drillBudget = "drill-dependency"
	drillPolicy = "drill-connector"
	// drillGRPCPolicy is the gRPC clients' connector, beside drillPolicy
	// under the same job layer and budget.
	drillGRPCPolicy = "drill-connector-grpc"
	drillClient     = "fleetclient"
	drillDep        = "metadep"
	// drillGRPCPort is metadep's gRPC port, set in its pod ($GRPC_ADDR)
	// and its Service.
	drillGRPCPort = 8081
)

// drillNamespaces hold the fleet, half of its pods each; the dependency
// and the fleet's one RetryBudget are in the first, which shares the budget
// with the second (consumers.namespaces): one count of all 20 pods, 10% of
// the fleet's primaries.
var drillNamespaces = []string{"drill-east", "drill-west"}

// drillForm is how long and how wide the drill runs.
type drillForm struct {
	full bool
	// podsPerNamespace client pods, each beginning ratePerPod operations a
	// second; before and after the trigger, the load runs for before and
	// after.
	podsPerNamespace int
	ratePerPod       int
	before, after    time.Duration
	length           map[string]time.Duration
	// naive lists the triggers run with naive retries too.
	naive []string
	// sustainFor is how long past the trigger the naive storm must last.
	sustainFor int
}

var triggerLengths = map[string]time.Duration{depseries.Outage: 8 * time.Second, depseries.Throttle: 8 * time.Second, depseries.Slow: 10 * time.Second}

// The full form (make fleet-drill) runs every trigger both ways, each run
// long enough for 60 s windows; the quick form (make e2e) runs the
// Retryguard run of every trigger and the naive run of the outage, in
// short windows: the whole load is one window, stricter than any 60 s one
// holding the trigger (it holds fewer primaries around the same retries).
var (
	fullDrill = drillForm{full: true, podsPerNamespace: 10, ratePerPod: 15, before: 10 * time.Second, after: 50 * time.Second,
		length: triggerLengths, naive: depseries.Kinds, sustainFor: 20}
	quickDrill = drillForm{podsPerNamespace: 10, ratePerPod: 15, before: 4 * time.Second, after: 8 * time.Second,
		length: triggerLengths, naive: []string{depseries.Outage}, sustainFor: 5}
)

func fleetDrillForm() drillForm {
	if os.Getenv("RETRYGUARD_FLEET_DRILL") == "full" {
		return fullDrill
	}
	return quickDrill
}

// fleetDrillOut is where the report goes.
func fleetDrillOut() string {
	if d := os.Getenv("RETRYGUARD_FLEET_DRILL_OUT"); d != "" {
		return d
	}
	return filepath.Join(repoRoot, "bin", "fleet-drill")
}

// drillMix is how many of a namespace's pods reach the dependency each
// way: three in ten through the sidecar, three in ten on runtime/grpc, the
// rest on the RoundTripper.
func drillMix(pods int) map[string]int {
	side, grpc := pods*3/10, pods*3/10
	return map[string]int{clientstats.HTTP: pods - side - grpc, clientstats.GRPC: grpc, clientstats.Sidecar: side}
}

// drillObjects are one namespace's client pods, a Deployment for each way
// of drillMix, all labelled app=fleetclient, which the budget counts.
func drillObjects(ns string, dep *corev1.Service, pods int) []client.Object {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: drillClient, Namespace: ns}},
		// The Go clients' and the sidecars' policy watch.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: drillClient, Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: drillClient, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: drillClient},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: drillClient, Namespace: ns}}},
	}
	depURL := svcURL(dep)
	for kind, n := range drillMix(pods) {
		if n == 0 {
			continue
		}
		policy := drillPolicy
		if kind == clientstats.GRPC {
			policy = drillGRPCPolicy
		}
		env := []corev1.EnvVar{{Name: "CLIENT", Value: kind}, {Name: "POLICY", Value: policy}, {Name: "DEP_URL", Value: depURL}}
		c := corev1.Container{
			Name: "client", Image: fleetclientImage, ImagePullPolicy: corev1.PullNever,
			Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe:  readyOnHealthz(),
			SecurityContext: restricted(),
		}
		spec := corev1.PodSpec{
			ServiceAccountName: drillClient,
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		}
		var annotations map[string]string
		switch kind {
		case clientstats.Sidecar:
			// No journal of its own: the sidecar keeps the letters.
			env = append(env, corev1.EnvVar{Name: "SIDECAR_URL", Value: fmt.Sprintf("http://127.0.0.1:%d", proxyPort)})
			annotations = map[string]string{webhooks.InjectAnnotation: "true", proxy.RoutesAnnotation: routeTable(drillPolicy, depURL)}
		default:
			if kind == clientstats.GRPC {
				env = append(env, corev1.EnvVar{Name: "DEP_GRPC", Value: fmt.Sprintf("%s:%d", dep.Spec.ClusterIP, drillGRPCPort)})
			}
			env = append(env, corev1.EnvVar{Name: "JOURNAL", Value: "/var/run/drill/letters.journal"})
			c.VolumeMounts = []corev1.VolumeMount{{Name: "journal", MountPath: "/var/run/drill"}}
			spec.Volumes = []corev1.Volume{{Name: "journal", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		c.Env = append(env, podIdentity()...)
		spec.Containers = []corev1.Container{c}
		d := deployment(drillClient+"-"+kind, map[string]string{"app": drillClient, "client": kind}, spec)
		d.Namespace, d.Spec.Replicas = ns, ptr.To(int32(n))
		d.Spec.Template.Annotations = annotations
		objs = append(objs, d)
	}
	return objs
}

// drillDependency is metadep's Deployment and Service.
func drillDependency(ns string) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": drillDep}
	dep := deployment(drillDep, labels, corev1.PodSpec{
		SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{
			Name: drillDep, Image: metadepImage, ImagePullPolicy: corev1.PullNever,
			Env:            []corev1.EnvVar{{Name: "GRPC_ADDR", Value: fmt.Sprintf(":%d", drillGRPCPort)}},
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: drillGRPCPort}},
			ReadinessProbe: readyOnHealthz(),
		}},
	})
	svc := service(drillDep, labels)
	svc.Spec.Ports[0].Name = "http"
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: drillGRPCPort, TargetPort: intstr.FromInt32(drillGRPCPort)})
	dep.Namespace, svc.Namespace = ns, ns
	return dep, svc
}

// drillPods are the Ready client pods' URLs by namespace/name.
func drillPods(ctx context.Context, g Gomega) map[string]string {
	urls := map[string]string{}
	for _, ns := range drillNamespaces {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": drillClient})).To(Succeed())
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if p.DeletionTimestamp == nil && c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					urls[ns+"/"+p.Name] = "http://" + p.Status.PodIP + ":8080"
				}
			}
		}
	}
	return urls
}

// eachPod calls f for every pod at once and fails on the first error.
func eachPod(pods map[string]string, f func(name, url string) error) {
	GinkgoHelper()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for name, url := range pods {
		wg.Go(func() {
			if err := f(name, url); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
}

// drainFor is how long a run waits for its operations to end.
const drainFor = 90 * time.Second

// drillRun runs one trigger in one mode: the load for before, the trigger
// for its length, the load for after; then it waits for every operation
// to end and collects what the dependency and the pods counted.
func drillRun(ctx context.Context, form drillForm, depURL string, pods map[string]string, kind, mode string) *fleet.Run {
	GinkgoHelper()
	// The previous run's stragglers have drained: nothing queued, no trigger on.
	Eventually(func(g Gomega) {
		var st struct {
			Queue   int    `json:"queue"`
			Trigger string `json:"trigger"`
		}
		g.Expect(call(ctx, "GET", depURL+"/state", nil, &st)).To(Succeed())
		g.Expect(st.Queue).To(BeZero())
		g.Expect(st.Trigger).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	run := kind + "-" + mode
	// The series' seconds are the clock's (metadep truncates its start), as
	// a budget's per-second allowance is: begun early in a second, the
	// series' first second holds nearly a second of load.
	for d := untilLoadStart(time.Now()); d > 0; d = untilLoadStart(time.Now()) {
		time.Sleep(d)
	}
	Expect(call(ctx, "POST", depURL+"/reset", nil, nil)).To(Succeed())
	eachPod(pods, func(_, url string) error {
		return call(ctx, "POST", fmt.Sprintf("%s/start?mode=%s&rate=%d&run=%s", url, mode, form.ratePerPod, run), nil, nil)
	})
	time.Sleep(form.before)
	length := form.length[kind]
	Expect(call(ctx, "POST", fmt.Sprintf("%s/trigger?kind=%s&for=%s", depURL, kind, length), nil, nil)).To(Succeed())
	time.Sleep(length + form.after)
	eachPod(pods, func(_, url string) error { return call(ctx, "POST", url+"/stop", nil, nil) })
	stopped := time.Now()

	// A naive operation can take 27 attempt timeouts and its delays, and
	// longer on a node the storm keeps busy; an operation still open after
	// drainFor is counted without a terminal state.
	stats := map[string]clientstats.Stats{}
	var mu sync.Mutex
	for deadline := time.Now().Add(drainFor); ; time.Sleep(time.Second) {
		eachPod(pods, func(name, url string) error {
			var s clientstats.Stats
			if err := call(ctx, "GET", url+"/stats", nil, &s); err != nil {
				return err
			}
			if s.Run != run {
				return fmt.Errorf("/stats is of run %q, not %q", s.Run, run)
			}
			mu.Lock()
			stats[name] = s
			mu.Unlock()
			return nil
		})
		open := 0
		for _, s := range stats {
			open += s.InFlight
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			logf("fleet drill, %s: %d operations still open %v after the load stopped", run, open, drainFor)
			break
		}
	}

	var series depseries.Series
	Expect(call(ctx, "GET", depURL+"/series", nil, &series)).To(Succeed())
	c := fleet.Clients{Pods: len(pods), Letters: map[string]int{}, FailedBy: map[string]int{}, Examples: map[string]string{},
		ByClient: map[string]fleet.Operations{}}
	for _, s := range stats {
		c.Started, c.Succeeded, c.Unknown = c.Started+s.Started, c.Succeeded+s.Succeeded, c.Unknown+s.Unknown
		c.InFlight, c.Refused, c.Unconfirmed = c.InFlight+s.InFlight, c.Refused+s.Refused, c.Unconfirmed+s.Unconfirmed
		c.UnknownLetters += s.UnknownLetters
		c.MaxLateMs = max(c.MaxLateMs, s.MaxLateMs)
		o := c.ByClient[s.Client]
		o.Pods++
		o.Started, o.Succeeded, o.Unknown = o.Started+s.Started, o.Succeeded+s.Succeeded, o.Unknown+s.Unknown
		for _, n := range s.Failed {
			o.Failed += n
		}
		c.ByClient[s.Client] = o
		for code, n := range s.Failed {
			c.Failed += n
			c.FailedBy[code] += n
		}
		for code, n := range s.Letters {
			c.Letters[code] += n
		}
		for code, e := range s.Examples {
			c.Examples[code] = e
		}
	}
	r := &fleet.Run{Trigger: kind, Mode: mode, PrimaryRate: form.ratePerPod * len(pods), LoadSeconds: stopped.Sub(series.Start).Seconds(),
		Series: series, Clients: c}
	Expect(r.Compute(form.sustainFor)).To(Succeed())
	f := r.Figures
	logf("fleet drill, %s %s: peak %d/s (×%.2f), max window ratio %.3f, recovery %.1f s (recovered %v), %d duplicates, %d lost, "+
		"%d unknown / %d lettered; clients %+v; verdict %+v", kind, mode, f.PeakReceived, f.MaxSecondRatio, f.MaxWindowRatio,
		f.RecoverySeconds, f.Recovered, f.Duplicates, f.Lost, f.Unknown, f.UnknownLettered, c, r.Verdict)
	return r
}

// fleetDrillSpec runs the fleet drill (docs/fleet-drill.md): 20 client
// pods in two namespaces against the dependency, every trigger with
// Retryguard and, as the form says, with naive retries; it writes the
// report and holds the Retryguard runs to their goals (and, in the full
// form, the naive runs to a storm that outlives the trigger).
func fleetDrillSpec(ctx context.Context) {
	form := fleetDrillForm()
	DeferCleanup(func(ctx SpecContext) {
		for _, ns := range drillNamespaces {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, ns := range drillNamespaces {
				var pods corev1.PodList
				g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
				g.Expect(pods.Items).To(BeEmpty(), ns)
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	}, NodeTimeout(3*time.Minute))
	start := time.Now()
	for _, ns := range drillNamespaces {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	depDep, depSvc := drillDependency(drillNamespaces[0])
	Expect(k8s.Create(ctx, depSvc)).To(Succeed())
	Expect(k8s.Create(ctx, depDep)).To(Succeed())
	depURL := svcURL(depSvc)
	Expect(create(ctx, filepath.Join("testdata", "fleet-drill-budget.yaml"), drillNamespaces[0])).To(Succeed())
	for _, ns := range drillNamespaces {
		Expect(create(ctx, filepath.Join("testdata", "fleet-drill.yaml"), ns)).To(Succeed())
		for _, o := range drillObjects(ns, depSvc, form.podsPerNamespace) {
			Expect(k8s.Create(ctx, o)).To(Succeed())
		}
	}
	want := form.podsPerNamespace * len(drillNamespaces)
	var pods map[string]string
	Eventually(func(g Gomega) {
		pods = drillPods(ctx, g)
		g.Expect(pods).To(HaveLen(want))
		var b policyv1alpha1.RetryBudget
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: drillNamespaces[0], Name: drillBudget}, &b)).To(Succeed())
		g.Expect(b.Status.Consumers).To(HaveValue(BeEquivalentTo(want)), "one count of both namespaces' pods")
		g.Expect(call(ctx, "GET", depURL+"/healthz", nil, nil)).To(Succeed())
	}).WithContext(ctx).WithPolling(time.Second).WithTimeout(4 * time.Minute).Should(Succeed())
	// Each pod retries only once a count taken after it started names it.
	for name, url := range pods {
		awaitShare(ctx, name, url+"/policy", drillBudget, ptr.To(int32(want)), int64(want))
	}
	record("fleet drill: 20 pods created to every pod's share covered", time.Since(start))

	rep := &fleet.Report{Capacity: 0, PrimaryRate: form.ratePerPod * want, Pods: want, Namespaces: len(drillNamespaces), Quick: !form.full,
		SustainFor: form.sustainFor, PodsBy: map[string]int{}}
	for kind, n := range drillMix(form.podsPerNamespace) {
		rep.PodsBy[kind] = n * len(drillNamespaces)
	}
	runs := time.Now()
	for _, kind := range depseries.Kinds {
		modes := []string{fleet.Retryguard}
		for _, k := range form.naive {
			if k == kind {
				modes = []string{fleet.Naive, fleet.Retryguard}
			}
		}
		for _, mode := range modes {
			r := drillRun(ctx, form, depURL, pods, kind, mode)
			rep.Capacity = r.Series.Capacity
			rep.Runs = append(rep.Runs, r)
		}
	}
	record("fleet drill: the runs", time.Since(runs))
	rep.Finish()
	out := fleetDrillOut()
	Expect(fleet.Write(out, rep)).To(Succeed())
	md := fleet.Markdown(rep)
	logf("fleet drill report in %s:\n%s", out, md)
	AddReportEntry("fleet drill", md)
	for _, r := range rep.Runs {
		switch {
		case r.Mode == fleet.Retryguard:
			Expect(r.Verdict.Failures).To(BeEmpty(), "the Retryguard run of %s", r.Trigger)
		case form.full:
			Expect(r.Verdict.Failures).To(BeEmpty(), "the naive run of %s: the drill did not reproduce the storm", r.Trigger)
		case !r.Verdict.Pass:
			logf("the quick naive run of %s did not reproduce the storm: %s", r.Trigger, strings.Join(r.Verdict.Failures, "; "))
		}
	}
}
