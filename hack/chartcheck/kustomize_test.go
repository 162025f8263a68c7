package chartcheck

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// kustomize builds config/ the way `make deploy` applies it.
func kustomize(t *testing.T, dir string) map[string][]object {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl (with its built-in kustomize) is needed to build config/")
	}
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	return splitObjects(t, string(out))
}

// Both kustomize installs build, carry what the chart carries, and name the
// objects the manager's certificate rotation flags default to.
func TestKustomizeBuilds(t *testing.T) {
	common := []string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "Namespace",
		"PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"}
	withCM := kustomize(t, "config/default")
	if got, want := kinds(withCM), sortedWith(common, "Certificate", "Issuer"); !slices.Equal(got, want) {
		t.Errorf("config/default: kinds %v, want %v", got, want)
	}
	without := kustomize(t, "config/without-cert-manager")
	if got, want := kinds(without), sortedWith(common, "Secret"); !slices.Equal(got, want) {
		t.Errorf("config/without-cert-manager: kinds %v, want %v", got, want)
	}
	if !slices.Contains(args(without), any("--cert-rotation")) || slices.Contains(args(withCM), any("--cert-rotation")) {
		t.Errorf("--cert-rotation: %v with cert-manager, %v without", args(withCM), args(without))
	}
	// The manager's defaults for --cert-secret, --webhook-service and
	// --webhook-configuration, and the ServiceAccount config/vap admits.
	for kind, name := range map[string]string{
		"Secret":                         "retryguard-webhook-cert",
		"Service":                        "retryguard-webhook-service",
		"ValidatingWebhookConfiguration": "retryguard-validating-webhook-configuration",
		"MutatingWebhookConfiguration":   "retryguard-proxy-injector",
		"ServiceAccount":                 "retryguard-controller-manager",
		"ValidatingAdmissionPolicy":      "retryguard-published-configmaps",
	} {
		if byName(without[kind], name) == nil {
			t.Errorf("config/without-cert-manager renders no %s %s", kind, name)
		}
	}
	// The component's policy, that lets the manager change only the caBundle
	// of its webhook configurations, comes with the rotation alone.
	if byName(without["ValidatingAdmissionPolicy"], "retryguard-webhook-ca-only") == nil ||
		byName(without["ValidatingAdmissionPolicyBinding"], "retryguard-webhook-ca-only") == nil {
		t.Error("config/without-cert-manager renders no retryguard-webhook-ca-only policy and binding")
	}
	if byName(withCM["ValidatingAdmissionPolicy"], "retryguard-webhook-ca-only") != nil {
		t.Error("config/default renders the webhook-ca-only policy, though the manager does not write its webhook configurations there")
	}
	if ns := byName(without["ServiceAccount"], "retryguard-controller-manager")["metadata"].(object)["namespace"]; ns != "retryguard-system" {
		t.Errorf("the ServiceAccount is in %v, config/vap admits retryguard-system", ns)
	}
}

func sortedWith(base []string, more ...string) []string {
	out := slices.Concat(base, more)
	slices.Sort(out)
	return out
}

// Issue 29: "The kustomize installs exclude only kube-system, not the
// operator's namespace, while the chart and the docs exclude both." Every
// install keeps the proxy injector out of kube-system and out of the
// namespace its manager runs in.
func TestEveryInstallKeepsTheInjectorOutOfKubeSystemAndItsOwnNamespace(t *testing.T) {
	for source, byKind := range map[string]map[string][]object{
		"the chart":                   mustTemplate(t),
		"config/default":              kustomize(t, "config/default"),
		"config/without-cert-manager": kustomize(t, "config/without-cert-manager"),
	} {
		deployments := byKind["Deployment"]
		if len(deployments) != 1 || len(byKind["MutatingWebhookConfiguration"]) != 1 {
			t.Fatalf("%s: %d Deployments, %d MutatingWebhookConfigurations", source, len(deployments), len(byKind["MutatingWebhookConfiguration"]))
		}
		own := deployments[0]["metadata"].(object)["namespace"]
		for _, w := range byKind["MutatingWebhookConfiguration"][0]["webhooks"].([]any) {
			var skipped []any
			for _, e := range w.(object)["namespaceSelector"].(object)["matchExpressions"].([]any) {
				if e := e.(object); e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn" {
					skipped = append(skipped, e["values"].([]any)...)
				}
			}
			if !slices.Contains(skipped, any("kube-system")) || !slices.Contains(skipped, own) {
				t.Errorf("%s: %v skips %v; want kube-system and the manager's namespace %v", source, w.(object)["name"], skipped, own)
			}
		}
	}
}
