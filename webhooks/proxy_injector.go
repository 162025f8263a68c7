package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/budget"
)

// The injector's contract with pods (docs/proxy.md).
const (
	// InjectAnnotation asks for the sidecar: "true" injects it.
	InjectAnnotation = "retryguard.io/inject"
	// InjectorPath is where the manager serves the injecting webhook; the
	// MutatingWebhookConfiguration (config/components/proxy-injector, the
	// chart) calls it only for pods whose InjectAnnotation is "true".
	InjectorPath = "/inject-retryguard-proxy"
	// ProxyContainer is the injected init container's name: a pod that
	// has one is left as it is, so a second pass changes nothing.
	ProxyContainer = "retryguard-proxy"
	// The volumes the sidecar mounts: the route table from the pod's own
	// annotation (downward API), and its dead-letter journal (an emptyDir,
	// which outlives the container's restarts).
	RoutesVolume = "retryguard-proxy-routes"
	StateVolume  = "retryguard-proxy-state"
)

// Where the injected sidecar finds its files: cmd/retryguard-proxy's defaults.
const (
	routesDir       = "/etc/retryguard/proxy"
	routesFile      = "routes.json"
	stateDir        = "/var/run/retryguard/proxy"
	deadLettersFile = "deadletters.journal"
	// proxyUser is the sidecar's user: the images' non-root user.
	proxyUser = 65532
)

// Injector adds retryguard-proxy as a native sidecar (an init container with
// restartPolicy Always) to every pod annotated retryguard.io/inject: "true":
// its env (POD_NAMESPACE, and POD_UID, by which a fleet budget's count names
// the pod), its volumes and its probes. A pod that asks for it without a
// route table the proxy accepts is refused, naming the annotation, the rule
// and the code: it fails closed for the pods that ask, and the webhook
// configuration's matchConditions keep every other pod from reaching it at
// all, so they never depend on it.
type Injector struct {
	// Image is the sidecar's image; PullPolicy its pull policy (IfNotPresent
	// when empty).
	Image      string
	PullPolicy corev1.PullPolicy
}

var _ admission.Defaulter[*corev1.Pod] = (*Injector)(nil)

// errNoImage is the manager's refusal to inject when it was started without
// --proxy-image: closed, never a pod with a sidecar that cannot start.
var errNoImage = errors.New("the manager was started without --proxy-image")

// Default injects the sidecar into pod, or refuses it.
func (in *Injector) Default(_ context.Context, pod *corev1.Pod) error {
	if pod.Annotations[InjectAnnotation] != "true" {
		return nil
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainer {
			return nil
		}
	}
	field := "metadata.annotations[" + strconv.Quote(proxy.RoutesAnnotation) + "]"
	routes, ok := pod.Annotations[proxy.RoutesAnnotation]
	if !ok {
		return fmt.Errorf("%s: required with %s: \"true\" (docs/proxy.md, the route table)", field, InjectAnnotation)
	}
	if _, err := proxy.Parse([]byte(routes)); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if in.Image == "" {
		return fmt.Errorf("%s: %w", InjectAnnotation, errNoImage)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == RoutesVolume || v.Name == StateVolume {
			return fmt.Errorf("spec.volumes: %s is reserved for the injected sidecar", v.Name)
		}
	}
	pod.Spec.InitContainers = append([]corev1.Container{in.container()}, pod.Spec.InitContainers...)
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: RoutesVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: routesFile,
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + proxy.RoutesAnnotation + "']"}}},
		}}},
		corev1.Volume{Name: StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
	)
	return nil
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// container is the sidecar: docs/proxy.md's manual YAML is this.
func (in *Injector) container() corev1.Container {
	pull := in.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	probe := func(failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(proxy.DefaultAdminPort)}},
			PeriodSeconds: 1, FailureThreshold: failures}
	}
	return corev1.Container{
		Name:            ProxyContainer,
		Image:           in.Image,
		ImagePullPolicy: pull,
		// Always: a native sidecar, started before the application's
		// containers and stopped after them.
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Args:          []string{"--routes=" + routesDir + "/" + routesFile, "--dead-letters=" + stateDir + "/" + deadLettersFile},
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv(budget.PodUIDEnv, "metadata.uid"),
		},
		Ports: []corev1.ContainerPort{{Name: "rg-proxy-admin", ContainerPort: proxy.DefaultAdminPort}},
		// The application starts once the proxy listens (a sidecar's
		// startup probe holds the next containers back).
		StartupProbe:   probe(60),
		ReadinessProbe: probe(3),
		VolumeMounts: []corev1.VolumeMount{
			{Name: RoutesVolume, MountPath: routesDir, ReadOnly: true},
			{Name: StateVolume, MountPath: stateDir},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](proxyUser),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// SetupInjectorWithManager serves the injector at InjectorPath.
func SetupInjectorWithManager(mgr ctrl.Manager, in *Injector) {
	mgr.GetWebhookServer().Register(InjectorPath, &webhook.Admission{Handler: admission.WithDefaulter[*corev1.Pod](mgr.GetScheme(), in).Handler})
}
