package webhooks_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/webhooks"
)

const testProxyImage = "retryguard/proxy:test"

const routes = `{"routes":[{"port":15001,"pathPrefix":"/v1/","policy":"sms-2fa-dispatch","upstream":"https://api.telephony.example"}]}`

func appPod(namespace, name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			InitContainers:               []corev1.Container{{Name: "migrate", Image: "busybox"}},
			Containers:                   []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	}
}

func injectAnnotations() map[string]string {
	return map[string]string{webhooks.InjectAnnotation: "true", proxy.RoutesAnnotation: routes}
}

var _ = Describe("the retryguard-proxy injector", func() {
	It("adds the native sidecar, its env and its volumes to a pod that asks, through the API server", func() {
		ns := newNamespace()
		pod := appPod(ns, "asks", injectAnnotations())
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Expect(pod.Spec.InitContainers).To(HaveLen(2))
		side := pod.Spec.InitContainers[0]
		Expect(side.Name).To(Equal(webhooks.ProxyContainer), "first, so that every later container has the proxy")
		Expect(pod.Spec.InitContainers[1].Name).To(Equal("migrate"))
		Expect(side.Image).To(Equal(testProxyImage))
		Expect(side.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)), "a native sidecar")
		env := map[string]string{}
		for _, e := range side.Env {
			Expect(e.ValueFrom).NotTo(BeNil(), e.Name)
			if f := e.ValueFrom.FieldRef; f != nil {
				env[e.Name] = f.FieldPath
			}
			if r := e.ValueFrom.ResourceFieldRef; r != nil {
				env[e.Name] = r.ContainerName + "/" + r.Resource
			}
		}
		Expect(env).To(HaveKeyWithValue("POD_NAMESPACE", "metadata.namespace"))
		Expect(env).To(HaveKeyWithValue(budget.PodUIDEnv, "metadata.uid"))
		// Issue 29: "1,000 concurrent connections take it past its memory
		// limit ... no GOMEMLIMIT": the Go runtime's soft limit is the
		// sidecar's own memory limit, as the manager's is.
		Expect(env).To(HaveKeyWithValue("GOMEMLIMIT", webhooks.ProxyContainer+"/limits.memory"))
		Expect(side.Resources.Limits.Memory().IsZero()).To(BeFalse(), "GOMEMLIMIT needs a memory limit")
		// The kubelet probes the pod's address, where only the metrics port
		// listens; the admin port (letters) is the pod's loopback only.
		Expect(side.StartupProbe.HTTPGet.Port.IntValue()).To(Equal(proxy.DefaultMetricsPort))
		Expect(side.ReadinessProbe.HTTPGet.Port.IntValue()).To(Equal(proxy.DefaultMetricsPort))
		Expect(side.Ports).To(ConsistOf(HaveField("ContainerPort", int32(proxy.DefaultMetricsPort))))
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Spec.Volumes {
			vols[v.Name] = v
		}
		Expect(vols).To(HaveKey(webhooks.StateVolume))
		Expect(vols[webhooks.StateVolume].EmptyDir).NotTo(BeNil())
		// Issue 29: "The journal grows until the pod is evicted." The journal's
		// cap and the volume's limit come from one place, the cap below half
		// the limit (compaction's copy sits beside the journal).
		Expect(vols[webhooks.StateVolume].EmptyDir.SizeLimit.Value()).To(BeEquivalentTo(webhooks.ProxyStateBytes))
		Expect(side.Args).To(ContainElement(fmt.Sprintf("--dead-letters-max-bytes=%d", webhooks.ProxyJournalMaxBytes)))
		Expect(2*webhooks.ProxyJournalMaxBytes + 1<<20).To(BeNumerically("<=", webhooks.ProxyStateBytes))
		Expect(vols).To(HaveKey(webhooks.RoutesVolume))
		Expect(vols[webhooks.RoutesVolume].DownwardAPI.Items[0].FieldRef.FieldPath).To(Equal("metadata.annotations['" + proxy.RoutesAnnotation + "']"))
		Expect(side.StartupProbe).NotTo(BeNil(), "the application starts once the proxy listens")
		Expect(side.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
		Expect(pod.Spec.Containers).To(HaveLen(1), "the application's containers are untouched")
	})

	It("changes nothing on a second pass", func() {
		in := &webhooks.Injector{Image: testProxyImage}
		pod := appPod("ns", "twice", injectAnnotations())
		Expect(in.Default(ctx, pod)).To(Succeed())
		once := pod.DeepCopy()
		Expect(in.Default(ctx, pod)).To(Succeed())
		Expect(pod).To(Equal(once))

		// Through the API server: a pod created from an injected spec (a
		// controller that copies a live pod) keeps exactly one sidecar.
		ns := newNamespace()
		again := appPod(ns, "again", injectAnnotations())
		again.Spec = once.Spec
		Expect(k8s.Create(ctx, again)).To(Succeed())
		Expect(again.Spec.InitContainers).To(HaveLen(2))
		Expect(again.Spec.Volumes).To(HaveLen(len(once.Spec.Volumes)))
	})

	// Issue 29: "hostNetwork/hostPID pods are injected." In the node's
	// namespaces the sidecar's loopback listeners and memory would be the
	// node's: refused, naming the field and the code.
	It("refuses a pod in the node's network, PID or IPC namespace", func() {
		ns := newNamespace()
		for field, set := range map[string]func(*corev1.PodSpec){
			"spec.hostNetwork": func(s *corev1.PodSpec) { s.HostNetwork = true },
			"spec.hostPID":     func(s *corev1.PodSpec) { s.HostPID = true },
			"spec.hostIPC":     func(s *corev1.PodSpec) { s.HostIPC = true },
		} {
			pod := appPod(ns, "host", injectAnnotations())
			set(&pod.Spec)
			err := k8s.Create(ctx, pod, client.DryRunAll)
			Expect(err).To(MatchError(ContainSubstring(field+": "+string(codes.InjectionUnsafe))), field)
		}
	})

	// Issue 29: "A pod that already has an init container named
	// retryguard-proxy is skipped whatever its image, privileges or env."
	// Only the sidecar exactly as the injector writes it (read back from the
	// API server, with its defaults) is left as it is; any other container
	// of its name is refused.
	It("refuses a container of the sidecar's name that is not the injector's", func() {
		in := &webhooks.Injector{Image: testProxyImage}
		injected := appPod("ns", "model", injectAnnotations())
		Expect(in.Default(ctx, injected)).To(Succeed())
		ns := newNamespace()
		for name, change := range map[string]func(*corev1.PodSpec){
			"image":      func(s *corev1.PodSpec) { s.InitContainers[0].Image = "attacker/proxy:latest" },
			"privileged": func(s *corev1.PodSpec) { s.InitContainers[0].SecurityContext.Privileged = ptr.To(true) },
			"env": func(s *corev1.PodSpec) {
				s.InitContainers[0].Env = append(s.InitContainers[0].Env, corev1.EnvVar{Name: "GODEBUG", Value: "x509ignoreCN=0"})
			},
			"args": func(s *corev1.PodSpec) {
				s.InitContainers[0].Args = append(s.InitContainers[0].Args, "--listen-host=0.0.0.0")
			},
			"command": func(s *corev1.PodSpec) { s.InitContainers[0].Command = []string{"/bin/sh"} },
			"volume": func(s *corev1.PodSpec) {
				for i, v := range s.Volumes {
					if v.Name == webhooks.StateVolume {
						s.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib"}}
					}
				}
			},
			"app container": func(s *corev1.PodSpec) {
				s.InitContainers = s.InitContainers[1:]
				s.Containers = append(s.Containers, corev1.Container{Name: webhooks.ProxyContainer, Image: "busybox"})
			},
		} {
			pod := appPod(ns, "copied", injectAnnotations())
			pod.Spec = *injected.Spec.DeepCopy()
			change(&pod.Spec)
			err := k8s.Create(ctx, pod, client.DryRunAll)
			Expect(err).To(MatchError(ContainSubstring(string(codes.InjectionUnsafe))), name)
		}
	})

	// Issue 29: "no CA bundle can be added to an injected pod." A pod names
	// a ConfigMap key (trust-manager's Bundle writes ca.crt) and the
	// injector mounts it into the sidecar, which verifies its upstreams
	// against it beside the system's roots; a second pass, through the API
	// server's defaults, still changes nothing.
	It("mounts the CAs a pod names and points the sidecar at them", func() {
		ns := newNamespace()
		ann := injectAnnotations()
		ann[webhooks.CAConfigMapAnnotation] = "team-roots"
		pod := appPod(ns, "ca", ann)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		side := pod.Spec.InitContainers[0]
		Expect(side.Args).To(ContainElement("--ca-file=/etc/retryguard/proxy-ca/ca.crt"))
		Expect(side.VolumeMounts).To(ContainElement(And(HaveField("Name", webhooks.CAVolume), HaveField("MountPath", "/etc/retryguard/proxy-ca"),
			HaveField("ReadOnly", true))))
		var ca *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == webhooks.CAVolume {
				ca = &pod.Spec.Volumes[i]
			}
		}
		Expect(ca).NotTo(BeNil())
		Expect(ca.ConfigMap.Name).To(Equal("team-roots"))
		Expect(ca.ConfigMap.Items).To(Equal([]corev1.KeyToPath{{Key: webhooks.DefaultCAKey, Path: "ca.crt"}}))
		Expect(ca.ConfigMap.Optional).To(BeNil(), "a pod whose CAs are missing waits for them")

		ann[webhooks.CAKeyAnnotation] = "bundle.pem"
		again := appPod(ns, "ca-again", ann)
		in := &webhooks.Injector{Image: testProxyImage}
		Expect(in.Default(ctx, again)).To(Succeed())
		copied := appPod(ns, "ca-copied", ann)
		copied.Spec = again.Spec
		Expect(k8s.Create(ctx, copied)).To(Succeed())
		Expect(copied.Spec.InitContainers).To(HaveLen(2))
		Expect(copied.Spec.Volumes[len(copied.Spec.Volumes)-1].ConfigMap.Items[0].Key).To(Equal("bundle.pem"))

		for name, bad := range map[string]map[string]string{
			webhooks.CAConfigMapAnnotation: {webhooks.CAConfigMapAnnotation: "Team_Roots"},
			webhooks.CAKeyAnnotation:       {webhooks.CAConfigMapAnnotation: "team-roots", webhooks.CAKeyAnnotation: "../ca"},
			"a key without a ConfigMap":    {webhooks.CAKeyAnnotation: "ca.crt"},
		} {
			a := injectAnnotations()
			for k, v := range bad {
				a[k] = v
			}
			err := k8s.Create(ctx, appPod(ns, "bad-ca", a), client.DryRunAll)
			Expect(err).To(MatchError(ContainSubstring(string(codes.InvalidRoute))), name)
		}
	})

	It("leaves a pod that does not ask as it is", func() {
		ns := newNamespace()
		for name, ann := range map[string]map[string]string{
			"none":  nil,
			"false": {webhooks.InjectAnnotation: "false", proxy.RoutesAnnotation: routes},
			"other": {"retryguard.io/other": "true"},
		} {
			pod := appPod(ns, name, ann)
			Expect(k8s.Create(ctx, pod)).To(Succeed(), name)
			Expect(pod.Spec.InitContainers).To(HaveLen(1), name)
			Expect(pod.Spec.Volumes).To(BeEmpty(), name)
		}
	})

	It("refuses a pod that asks without a route table the proxy accepts, naming the annotation, the field and the code", func() {
		ns := newNamespace()
		err := k8s.Create(ctx, appPod(ns, "no-routes", map[string]string{webhooks.InjectAnnotation: "true"}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(proxy.RoutesAnnotation))

		bad := injectAnnotations()
		bad[proxy.RoutesAnnotation] = `{"routes":[{"port":80,"policy":"p","upstream":"https://h"}]}`
		err = k8s.Create(ctx, appPod(ns, "bad-routes", bad))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("routes[0].port"))
		Expect(err.Error()).To(ContainSubstring(string(codes.OutOfRange)))

		Expect((&webhooks.Injector{}).Default(ctx, appPod(ns, "no-image", injectAnnotations()))).
			To(MatchError(ContainSubstring("--proxy-image")), "closed, never a sidecar that cannot start")
	})

	It("fails open for pods that do not ask and closed for those that do, when the injector is unreachable", func() {
		// The shipped configuration, pointed at a port nothing serves.
		data, err := os.ReadFile(testenv.Path("config", "webhook", "proxy_injector.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		Expect(yaml.Unmarshal(data, &cfg)).To(Succeed())
		cfg.Name = "unreachable-proxy-injector"
		cfg.Webhooks[0].Name = "unreachable.proxy.retryguard.io"
		cfg.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/inject")}
		Expect(k8s.Create(ctx, &cfg)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, &cfg))).To(Succeed()) })

		ns := newNamespace()
		Eventually(func() error {
			return k8s.Create(ctx, appPod(ns, "asks", injectAnnotations()), client.DryRunAll)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("unreachable.proxy.retryguard.io")))
		Expect(k8s.Create(ctx, appPod(ns, "does-not-ask", nil))).To(Succeed())
		err = k8s.Create(ctx, appPod(ns, "asks", injectAnnotations()))
		Expect(apierrors.IsInternalError(err) || strings.Contains(err.Error(), "failed calling webhook")).To(BeTrue(), "%v", err)
	})
})
