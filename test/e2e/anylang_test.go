package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/hack/publish"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/webhooks"
)

// A service that is not written in Go: busybox httpd runs
// testdata/wget-send.cgi, which sends each SMS with busybox wget in plain
// HTTP to localhost:15001, where the injected retryguard-proxy governs it.
const (
	wgetApp   = "wgetapp"
	proxyPort = 15001
	// anyBudget and anyPolicy are testdata/any-language-fleet.yaml's: a fleet
	// budget shared by a Go pod and a wget pod.
	anyBudget    = "any-language"
	anyPolicy    = "any-language-dispatch"
	anyAllowance = 4
	anyLabel     = "retryguard.io/e2e-fleet"
)

// sendURL is an application's /send: smsapp's, or the CGI's under busybox httpd.
func sendURL(base, app string) string {
	if app == wgetApp {
		return base + "/cgi-bin/send"
	}
	return base + "/send"
}

// routeTable is the pod's retryguard.io/routes: /v1/ on localhost:15001 to
// the vendor under policy.
func routeTable(policy, vendorURL string) string {
	b, err := json.Marshal(proxy.Table{Routes: []proxy.Route{{Port: proxyPort, PathPrefix: "/v1/", Policy: policy, Upstream: vendorURL}}})
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// wgetapp is the Deployment and Service of the busybox application, asking
// for the sidecar with the annotation alone. Its ConfigMap holds the CGI.
func wgetapp(name, policy, vendorURL string, labels map[string]string) (*corev1.ConfigMap, *appsv1.Deployment, *corev1.Service) {
	GinkgoHelper()
	cgi, err := os.ReadFile(filepath.Join("testdata", "wget-send.cgi"))
	Expect(err).NotTo(HaveOccurred())
	get, err := os.ReadFile(filepath.Join("testdata", "wget-get.cgi"))
	Expect(err).NotTo(HaveOccurred())
	admin, err := os.ReadFile(filepath.Join("testdata", "wget-admin.cgi"))
	Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-www", Namespace: appNamespace},
		Data: map[string]string{"send": string(cgi), "get": string(get), "admin": string(admin), "healthz": "ok\n"}}
	labels = map[string]string{"app": name, anyLabel: labels[anyLabel]}
	if labels[anyLabel] == "" {
		delete(labels, anyLabel)
	}
	spec := corev1.PodSpec{
		ServiceAccountName: "smsapp", // the app Role: the sidecar's informer reads the policies
		SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		Containers: []corev1.Container{{
			Name: "app", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
			Args:            []string{"httpd", "-f", "-p", "8080", "-h", "/www"},
			Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe:  readyOnHealthz(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "www", MountPath: "/www", ReadOnly: true}},
			SecurityContext: restricted(),
		}},
		Volumes: []corev1.Volume{{Name: "www", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name},
			Items: []corev1.KeyToPath{{Key: "send", Path: "cgi-bin/send", Mode: ptr.To[int32](0o555)},
				{Key: "get", Path: "cgi-bin/get", Mode: ptr.To[int32](0o555)},
				{Key: "admin", Path: "cgi-bin/admin", Mode: ptr.To[int32](0o555)},
				{Key: "healthz", Path: "healthz", Mode: ptr.To[int32](0o444)}},
		}}}},
	}
	dep := deployment(name, labels, spec)
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	dep.Spec.Template.Annotations = map[string]string{webhooks.InjectAnnotation: "true", proxy.RoutesAnnotation: routeTable(policy, vendorURL)}
	return cm, dep, service(name, map[string]string{"app": name})
}

// readyPod waits for the Deployment's one Ready pod and returns it.
func readyPod(ctx context.Context, name string) *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(appNamespace), client.MatchingLabels{"app": name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
		p := pods.Items[0]
		g.Expect(p.DeletionTimestamp).To(BeNil())
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		g.Expect(ready).To(BeTrue(), "%s: %+v", p.Name, p.Status.ContainerStatuses)
		pod = &p
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	return pod
}

// adminURL reaches the injected sidecar's admin port, which answers on the
// pod's loopback only, through the wgetapp's own /cgi-bin/admin (a path
// follows).
func adminURL(pod *corev1.Pod) string {
	return fmt.Sprintf("http://%s:8080/cgi-bin/admin?path=", pod.Status.PodIP)
}

// ProxyLetters mirrors the sidecar's /deadletters.
type ProxyLetters struct {
	Unforwarded int `json:"unforwarded"`
	Letters     []struct {
		Policy   string `json:"policy"`
		Key      string `json:"key"`
		State    string `json:"state"`
		Code     string `json:"code"`
		Attempts []any  `json:"attempts"`
	} `json:"letters"`
}

// expectLetter finds the sidecar's dead letter for key and checks it.
func expectLetter(ctx context.Context, pod *corev1.Pod, key, code string, attempts int) {
	GinkgoHelper()
	var dl ProxyLetters
	Expect(call(ctx, "GET", adminURL(pod)+"/deadletters", nil, &dl)).To(Succeed())
	for _, l := range dl.Letters {
		if l.Key == key {
			Expect(l.Code).To(Equal(code), "%+v", l)
			Expect(l.Attempts).To(HaveLen(attempts), "%+v", l)
			return
		}
	}
	Fail(fmt.Sprintf("no dead letter for %s in the sidecar's journal: %+v", key, dl))
}

// injectedSidecar checks the injector's work on a running pod: the sidecar
// runs the proxy image the suite verified, pulled from the node's registry.
func injectedSidecar(pod *corev1.Pod) {
	GinkgoHelper()
	Expect(pod.Spec.InitContainers).NotTo(BeEmpty())
	side := pod.Spec.InitContainers[0]
	Expect(side.Name).To(Equal(webhooks.ProxyContainer))
	Expect(side.Image).To(Equal(proxyImage.Ref()), "the injector adds the verified proxy image, by digest")
	expectPulledFromRegistry(pod, map[string]publish.Artifact{webhooks.ProxyContainer: proxyImage})
	Expect(side.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
	Expect(pod.Spec.Containers).To(HaveLen(1), "the application's containers are its own")
}

// anyLanguageSpec: the busybox pod's wget, through the injected sidecar,
// gets RETRY-SMS-001's policy exactly as the Go applications do.
func anyLanguageSpec(
	ctx context.Context,
	vendorSvc *corev1.Service,
	storm func(context.Context, string, string, string, []int) (SendResult, []Attempt),
) *corev1.Service {
	cm, dep, svc := wgetapp(wgetApp, "sms-2fa-dispatch", svcURL(vendorSvc), nil)
	for _, o := range []client.Object{cm, svc, dep} {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	start := time.Now()
	pod := readyPod(ctx, wgetApp)
	record("wget pod with the injected sidecar Ready", time.Since(start))
	injectedSidecar(pod)
	Eventually(func() error { return call(ctx, "GET", svcURL(svc)+"/healthz", nil, nil) }).
		WithContext(ctx).WithPolling(200 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())

	r, seen := storm(ctx, svcURL(svc), wgetApp, "wget", []int{503, 503, 503, 503, 503})
	Expect(seen).To(HaveLen(3), "a 503 storm through the sidecar: the vendor's log %+v", seen)
	for _, a := range seen {
		Expect(a.Status).To(Equal(503))
		Expect(a.Key).To(Equal("SMS-2FA-wget-s-9"), "every retry carries the key the sidecar rendered from the wget's headers")
	}
	Expect(r.Status).To(Equal(503), "wget receives the sidecar's problem: %+v", r)
	expectLetter(ctx, pod, "SMS-2FA-wget-s-9", "ERR_RETRY_LIMIT_EXCEEDED", 3)

	r, seen = storm(ctx, svcURL(svc), wgetApp, "wget-bad", []int{400})
	Expect(seen).To(HaveLen(1), "a 400 is never retried: %+v", seen)
	Expect(r.Status).To(Equal(400), "wget receives the vendor's own 400: %+v", r)
	expectLetter(ctx, pod, "SMS-2FA-wget-bad-s-9", "ERR_PERMANENT_FAILURE", 1)
	return svc
}

// anyLanguageFleetSpec: a Go pod and the wget pod share one fleet budget of
// anyAllowance retries/s. The count names both, each divides by 2, and the
// vendor sees at most the allowance through both, and at most the wget pod's
// share (but some) through it alone.
func anyLanguageFleetSpec(ctx context.Context, vendorSvc *corev1.Service) {
	Expect(create(ctx, filepath.Join("testdata", "any-language-fleet.yaml"), appNamespace)).To(Succeed())
	goDep, _ := smsapp("smsapp-any", "informer", svcURL(vendorSvc))
	goDep.Spec.Template.Labels[anyLabel] = "shared"
	goDep.Spec.Template.Spec.Containers[0].Env = append(goDep.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "POLICY", Value: anyPolicy})
	cm, wgetDep, _ := wgetapp("wgetapp-any", anyPolicy, svcURL(vendorSvc), map[string]string{anyLabel: "shared"})
	DeferCleanup(func(ctx SpecContext) {
		for _, o := range []client.Object{goDep, wgetDep, cm,
			&policyv1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: anyPolicy}},
			&policyv1alpha1.RetryBudget{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: anyBudget}},
		} {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed())
		}
		Expect(call(ctx, "PUT", svcURL(vendorSvc)+"/script", []int{}, nil)).To(Succeed())
	}, NodeTimeout(time.Minute))
	for _, o := range []client.Object{cm, goDep, wgetDep} {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	goPod, wgetPod := readyPod(ctx, "smsapp-any"), readyPod(ctx, "wgetapp-any")
	injectedSidecar(wgetPod)
	start := time.Now()
	awaitShare(ctx, goPod.Name, "http://"+goPod.Status.PodIP+":8080/policy", anyBudget, ptr.To[int32](2), 2)
	awaitShare(ctx, wgetPod.Name, adminURL(wgetPod)+"/policies/"+anyPolicy, anyBudget, ptr.To[int32](2), 2)
	record("any-language fleet: pods created to both shares covered", time.Since(start))

	both := driveFleet(ctx, svcURL(vendorSvc), map[string]string{
		goPod.Name:   "http://" + goPod.Status.PodIP + ":8080",
		wgetPod.Name: "http://" + wgetPod.Status.PodIP + ":8080/cgi-bin",
	}, "any", "a Go pod and a wget pod sharing 4 retries/s")
	alone := driveFleet(ctx, svcURL(vendorSvc), map[string]string{
		wgetPod.Name: "http://" + wgetPod.Status.PodIP + ":8080/cgi-bin",
	}, "anywget", "the wget pod's share of 4 retries/s over 2 pods")
	// One retry of skew a second, as in the fleet spec: a retry arrives a
	// backoff and a hop after its budget granted it.
	Expect(both.perSecond).NotTo(BeEmpty())
	Expect(both.max()).To(BeNumerically("<=", anyAllowance+1), "%s", both)
	Expect(both.mean()).To(BeNumerically("<=", anyAllowance+0.5), "%s", both)
	Expect(alone.max()).To(BeNumerically("<=", anyAllowance/2+1), "the wget pod took more than its share: %s", alone)
	Expect(alone.mean()).To(BeNumerically(">=", 1), "the wget pod took no share: %s", alone)
	var b policyv1alpha1.RetryBudget
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: anyBudget}, &b)).To(Succeed())
	Expect(b.Status.Consumers).To(HaveValue(BeEquivalentTo(2)), "the count holds the Go pod and the wget pod")
}
