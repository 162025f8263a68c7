package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

// appNamespace holds the policies and the applications that use them.
const appNamespace = "payments"

// readObjects decodes a multi-document YAML file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs, nil
}

// create creates every object of a file in namespace, stopping at the first
// refusal, which it returns.
func create(ctx context.Context, path, namespace string, opts ...client.CreateOption) error {
	objs, err := readObjects(path)
	if err != nil {
		return err
	}
	for _, o := range objs {
		o.SetNamespace(namespace)
		if err := k8s.Create(ctx, o, opts...); err != nil {
			return err
		}
	}
	return nil
}

// appRole is the Role the README documents for application pods: read the
// published ConfigMaps of their own namespace, nothing else. The suite uses
// config/samples/app-rbac.yaml when the checkout has it.
func appRole() []client.Object {
	return []client.Object{&rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "retryguard-policy-reader", Namespace: appNamespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}}
}

// podIdentity is the pod's namespace, name and UID from the downward API:
// the runtime reads its namespace's policies, and a fleet budget's count
// names the pod by its UID.
func podIdentity() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return []corev1.EnvVar{field("POD_NAMESPACE", "metadata.namespace"), field("POD_NAME", "metadata.name"), field("POD_UID", "metadata.uid")}
}

// readyOnHealthz is the readiness of every app of the suite: /healthz on
// port 8080, asked every second.
func readyOnHealthz() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
}

// restricted is the container security context of the Pod Security
// Standards' restricted profile, with a read-only root.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// smsapp is a Deployment and Service of the demo application.
func smsapp(name, watch, vendorURL string) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": name}
	container := corev1.Container{
		Name: "app", Image: smsappImage, ImagePullPolicy: corev1.PullNever,
		Env: append([]corev1.EnvVar{
			{Name: "WATCH", Value: watch},
			{Name: "VENDOR_URL", Value: vendorURL},
		}, podIdentity()...),
		Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
		ReadinessProbe:  readyOnHealthz(),
		SecurityContext: restricted(),
	}
	spec := corev1.PodSpec{
		ServiceAccountName: "smsapp",
		SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		Containers:         []corev1.Container{container},
	}
	if watch == "files" {
		// The mounted policy needs no API access at all.
		spec.AutomountServiceAccountToken = ptr.To(false)
		spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: "POLICY_DIR", Value: "/etc/retryguard/policies"})
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "policies", MountPath: "/etc/retryguard/policies", ReadOnly: true}}
		spec.Volumes = []corev1.Volume{{Name: "policies", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: policyconfig.ConfigMapName("sms-2fa-dispatch")},
			Items:                []corev1.KeyToPath{{Key: policyconfig.DataKey, Path: "sms-2fa-dispatch.json"}},
		}}}}
	}
	return deployment(name, labels, spec), service(name, labels)
}

func vendor() (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": "vendor"}
	return deployment("vendor", labels, corev1.PodSpec{
		SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{
			Name: "vendor", Image: vendorImage, ImagePullPolicy: corev1.PullNever,
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: readyOnHealthz(),
		}},
	}), service("vendor", labels)
}

func deployment(name string, labels map[string]string, spec corev1.PodSpec) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

func service(name string, labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNamespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// httpClient reaches ClusterIP Services from the host through kube-proxy.
var httpClient = &http.Client{Timeout: 15 * time.Second}

func call(ctx context.Context, method, url string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return err
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, url, res.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Attempt mirrors the vendor's log entry.
type Attempt struct {
	Key    string `json:"key"`
	Status int    `json:"status"`
}

// SendResult mirrors smsapp's /send answer.
type SendResult struct {
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
	Last     any    `json:"last"`
}

// Short names for the kinds the uninstall check lists.
type (
	admissionList     = admissionregistrationv1.ValidatingWebhookConfigurationList
	pdbList           = policyv1.PodDisruptionBudgetList
	networkPolicyList = networkingv1.NetworkPolicyList
	apiextCRD         = apiextensionsv1.CustomResourceDefinition
)
