package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/contract/codes"
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
	// has one exactly as the injector writes it is left as it is, so a
	// second pass changes nothing; any other container of that name is
	// refused.
	ProxyContainer = "retryguard-proxy"
	// The volumes the sidecar mounts: the route table from the pod's own
	// annotation (downward API), and its dead-letter journal (an emptyDir,
	// which outlives the container's restarts).
	RoutesVolume = "retryguard-proxy-routes"
	StateVolume  = "retryguard-proxy-state"
	// CAVolume holds the CAs a pod names in CAConfigMapAnnotation.
	CAVolume = "retryguard-proxy-ca"
)

// InjectedLabel marks a pod the injector gave the sidecar, so that the
// chart's sidecar PodMonitor selects it (a monitor selects by label, never
// by annotation) and scrapes its ProxyMetricsPortName.
const (
	InjectedLabel        = "retryguard.io/proxy"
	InjectedLabelValue   = "injected"
	ProxyMetricsPortName = "rg-metrics"
)

// A pod's own CAs, which the sidecar verifies its upstreams against beside
// the system's roots: a ConfigMap key, as trust-manager's Bundle writes
// one (docs/proxy.md).
const (
	// CAConfigMapAnnotation names a ConfigMap of the pod's namespace.
	CAConfigMapAnnotation = "retryguard.io/proxy-ca-configmap"
	// CAKeyAnnotation names its key, DefaultCAKey when absent.
	CAKeyAnnotation = "retryguard.io/proxy-ca-key"
	DefaultCAKey    = "ca.crt"
)

// Where the injected sidecar finds its files: cmd/retryguard-proxy's defaults.
const (
	routesDir       = "/etc/retryguard/proxy"
	routesFile      = "routes.json"
	stateDir        = "/var/run/retryguard/proxy"
	caDir           = "/etc/retryguard/proxy-ca"
	caFile          = "ca.crt"
	deadLettersFile = "deadletters.journal"
	// proxyUser is the sidecar's user: the images' non-root user.
	proxyUser = 65532
)

// The sidecar's disk: one home for both numbers.
const (
	// ProxyStateBytes is the state volume's sizeLimit: the kubelet evicts
	// a pod whose emptyDir outgrows it.
	ProxyStateBytes = 64 << 20
	// ProxyJournalMaxBytes is the journal's cap (--dead-letters-max-bytes):
	// half the volume less a mebibyte, since compaction's copy is never
	// larger than the file it replaces and the forwarded mark is 512 bytes.
	// At the cap a letter is not kept and the application is told, and
	// the pod is never evicted for it.
	ProxyJournalMaxBytes = (ProxyStateBytes - 1<<20) / 2
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
	if err := hostNamespaces(&pod.Spec); err != nil {
		return err
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
	ca, err := caOf(pod.Annotations)
	if err != nil {
		return err
	}
	side, volumes := in.container(ca), in.volumes(ca)
	for i, c := range pod.Spec.Containers {
		if c.Name == ProxyContainer {
			return unsafe(fmt.Sprintf("spec.containers[%d]", i), "a container named "+ProxyContainer+" is reserved for the injected sidecar")
		}
	}
	for i, c := range pod.Spec.InitContainers {
		if c.Name != ProxyContainer {
			continue
		}
		// A second pass, or a spec copied from an injected pod: left as it
		// is only when it is exactly what the injector writes.
		if !equality.Semantic.DeepEqual(defaultedContainer(c), defaultedContainer(side)) {
			return unsafe(fmt.Sprintf("spec.initContainers[%d]", i), "a container named "+ProxyContainer+
				" that is not the sidecar this injector writes (its image, args, env, mounts, resources or privileges differ); remove it, and the injector adds its own")
		}
		for _, want := range volumes {
			if j := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == want.Name }); j < 0 ||
				!equality.Semantic.DeepEqual(defaultedVolume(pod.Spec.Volumes[j]), defaultedVolume(want)) {
				return unsafe("spec.volumes", "the sidecar's volume "+want.Name+" is missing or is not the one the injector writes")
			}
		}
		return nil
	}
	for _, v := range pod.Spec.Volumes {
		if slices.ContainsFunc(volumes, func(w corev1.Volume) bool { return w.Name == v.Name }) {
			return fmt.Errorf("spec.volumes: %s is reserved for the injected sidecar", v.Name)
		}
	}
	pod.Spec.InitContainers = append([]corev1.Container{side}, pod.Spec.InitContainers...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes...)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[InjectedLabel] = InjectedLabelValue
	return nil
}

// unsafe is the refusal of a pod the injector cannot make safe.
func unsafe(field, rule string) error {
	return fmt.Errorf("%s: %s", field, codes.InjectionUnsafe.Message(rule))
}

// hostNamespaces refuses a pod in the node's network, PID or IPC namespace:
// the sidecar's loopback listeners (its routes, its letters) would be the
// node's, open to every host-network pod and process on it, and its memory
// visible to the node's. Refused rather than left uninjected: the pod asked
// for the sidecar, and without it its calls to localhost would reach
// whatever listens on the node.
func hostNamespaces(spec *corev1.PodSpec) error {
	for field, on := range map[string]bool{"spec.hostNetwork": spec.HostNetwork, "spec.hostPID": spec.HostPID, "spec.hostIPC": spec.HostIPC} {
		if on {
			return unsafe(field, "the sidecar cannot be injected into a pod in the node's namespaces: its loopback listeners and memory would be the node's")
		}
	}
	return nil
}

// defaultedContainer is c with the API server's defaults for what the
// injector leaves unset, so that the sidecar it wrote compares equal to
// the same sidecar read back from the API server.
func defaultedContainer(c corev1.Container) corev1.Container {
	c = *c.DeepCopy()
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p == nil {
			continue
		}
		for _, d := range []struct {
			v   *int32
			def int32
		}{{&p.TimeoutSeconds, 1}, {&p.PeriodSeconds, 10}, {&p.SuccessThreshold, 1}, {&p.FailureThreshold, 3}} {
			if *d.v == 0 {
				*d.v = d.def
			}
		}
		if h := p.HTTPGet; h != nil && h.Scheme == "" {
			h.Scheme = corev1.URISchemeHTTP
		}
	}
	return c
}

// defaultedVolume is v with the API server's defaults, as defaultedContainer.
func defaultedVolume(v corev1.Volume) corev1.Volume {
	v = *v.DeepCopy()
	if d := v.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = ptr.To(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range d.Items {
			if f := d.Items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	}
	if c := v.ConfigMap; c != nil && c.DefaultMode == nil {
		c.DefaultMode = ptr.To(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	return v
}

// caRef is the ConfigMap key a pod names for its CAs; nil: none.
type caRef struct{ name, key string }

// caOf reads the pod's CA annotations, refusing a name or key the API
// server would refuse in a volume, naming the annotation.
func caOf(ann map[string]string) (*caRef, error) {
	name, ok := ann[CAConfigMapAnnotation]
	key, keyed := ann[CAKeyAnnotation]
	field := func(a string) string { return "metadata.annotations[" + strconv.Quote(a) + "]" }
	switch {
	case !ok && keyed:
		return nil, fmt.Errorf("%s: %s", field(CAKeyAnnotation), codes.InvalidRoute.Message("given without "+CAConfigMapAnnotation))
	case !ok:
		return nil, nil
	case !keyed:
		key = DefaultCAKey
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", field(CAConfigMapAnnotation), codes.InvalidRoute.Message(fmt.Sprintf("%q is not a ConfigMap name: %s", name, errs[0])))
	}
	if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", field(CAKeyAnnotation), codes.InvalidRoute.Message(fmt.Sprintf("%q is not a ConfigMap key: %s", key, errs[0])))
	}
	return &caRef{name: name, key: key}, nil
}

// volumes are the sidecar's: its route table from the pod's annotation, its
// state, and the pod's CAs when it names them.
func (in *Injector) volumes(ca *caRef) []corev1.Volume {
	out := in.baseVolumes()
	if ca != nil {
		// Not optional: a pod whose CAs are missing waits for them (the
		// kubelet says which), never starts trusting less than it asked.
		out = append(out, corev1.Volume{Name: CAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ca.name}, Items: []corev1.KeyToPath{{Key: ca.key, Path: caFile}}}}})
	}
	return out
}

func (in *Injector) baseVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: RoutesVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: routesFile,
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + proxy.RoutesAnnotation + "']"}}},
		}}},
		{Name: StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: resource.NewQuantity(ProxyStateBytes, resource.BinarySI)}}},
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// container is the sidecar: docs/proxy.md's manual YAML is this.
func (in *Injector) container(ca *caRef) corev1.Container {
	pull := in.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	probe := func(failures int32) *corev1.Probe {
		// The kubelet probes the pod's address: the metrics port, the one
		// that listens there (the admin port is the pod's loopback only).
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(proxy.DefaultMetricsPort)}},
			PeriodSeconds: 1, FailureThreshold: failures}
	}
	args := []string{"--routes=" + routesDir + "/" + routesFile, "--dead-letters=" + stateDir + "/" + deadLettersFile,
		"--dead-letters-max-bytes=" + strconv.Itoa(ProxyJournalMaxBytes)}
	c := corev1.Container{
		Name:            ProxyContainer,
		Image:           in.Image,
		ImagePullPolicy: pull,
		// Always: a native sidecar, started before the application's
		// containers and stopped after them.
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Args:          args,
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv(budget.PodUIDEnv, "metadata.uid"),
			// The Go runtime's soft limit is the container's memory limit
			// (in bytes), as the manager's: it collects harder near the
			// limit rather than letting the heap double past it.
			{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				ContainerName: ProxyContainer, Resource: "limits.memory"}}},
		},
		Ports: []corev1.ContainerPort{{Name: ProxyMetricsPortName, ContainerPort: proxy.DefaultMetricsPort}},
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
			Limits:   corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(proxy.MemoryLimit, resource.BinarySI)},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](proxyUser),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if ca != nil {
		c.Args = append(c.Args, "--ca-file="+caDir+"/"+caFile)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: CAVolume, MountPath: caDir, ReadOnly: true})
	}
	return c
}

// SetupInjectorWithManager serves the injector at InjectorPath.
func SetupInjectorWithManager(mgr ctrl.Manager, in *Injector) {
	mgr.GetWebhookServer().Register(InjectorPath, &webhook.Admission{Handler: admission.WithDefaulter[*corev1.Pod](mgr.GetScheme(), in).Handler})
}
