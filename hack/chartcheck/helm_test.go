package chartcheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"

	"github.com/retryguard/retryguard/internal/testenv"
)

// helm install, upgrade and uninstall, through Helm's SDK, against a real API
// server without the CRDs: Helm creates every object, an upgrade that
// changes a value changes the Deployment, and an uninstall removes
// everything but the CRDs (which Helm never deletes).
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	helm := helmFor(t, env.KubeConfig)
	ctx := context.Background()

	// helm install rg charts/retryguard -n retryguard-system --create-namespace
	//   --set webhook.certManager.enabled=false   (no cert-manager here)
	install := action.NewInstall(helm)
	install.ReleaseName, install.Namespace, install.CreateNamespace = release, namespace, true
	if _, err := install.Run(loadChart(t), values(t, "webhook.certManager.enabled=false")); err != nil {
		t.Fatal(err)
	}
	ns := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: namespace, Name: name} }
	cluster := func(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
	installed := []struct {
		key client.ObjectKey
		obj client.Object
	}{
		{ns("rg-retryguard"), &appsv1.Deployment{}},
		{ns("rg-retryguard-webhook"), &corev1.Service{}},
		{ns("rg-retryguard-metrics"), &corev1.Service{}},
		{ns("rg-retryguard-webhook-cert"), &corev1.Secret{}},
		{ns("rg-retryguard"), &policyv1.PodDisruptionBudget{}},
		{ns("rg-retryguard-leader-election"), &rbacv1.Role{}},
		{cluster("rg-retryguard"), &rbacv1.ClusterRole{}},
		{cluster("rg-retryguard-metrics-auth"), &rbacv1.ClusterRoleBinding{}},
		{cluster("rg-retryguard"), &admissionv1.ValidatingWebhookConfiguration{}},
		{cluster("rg-retryguard-published-configmaps"), &admissionv1.ValidatingAdmissionPolicy{}},
	}
	crds := []string{"retrypolicies.policy.retryguard.io", "retrybudgets.policy.retryguard.io"}
	for _, name := range crds {
		if err := c.Get(ctx, cluster(name), &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s: %v", name, err)
		}
	}
	for _, want := range installed {
		if err := c.Get(ctx, want.key, want.obj); err != nil {
			t.Errorf("%T %s: %v", want.obj, want.key, err)
		}
	}

	// The README's upgrade: kubectl apply --server-side -f charts/retryguard/crds/
	for _, crd := range loadChart(t).CRDObjects() {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(crd.File.Data, &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl")); err != nil {
			t.Fatalf("applying %s server-side: %v", crd.Name, err)
		}
	}

	// helm upgrade rg charts/retryguard --reuse-values --set limits.maxLeafAttempts=5
	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace, upgrade.ReuseValues = namespace, true
	if _, err := upgrade.Run(release, loadChart(t), values(t, "limits.maxLeafAttempts=5")); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, ns("rg-retryguard"), &d); err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--max-leaf-attempts=5") || !slices.Contains(args, "--cert-rotation") {
		t.Errorf("after the upgrade the manager runs with %v", args)
	}

	// helm uninstall rg
	if _, err := action.NewUninstall(helm).Run(release); err != nil {
		t.Fatal(err)
	}
	for _, want := range installed {
		if err := c.Get(ctx, want.key, want.obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s left after uninstall: %v", want.obj, want.key, err)
		}
	}
	for _, name := range crds {
		if err := c.Get(ctx, cluster(name), &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("uninstall removed CRD %s: %v", name, err)
		}
	}
	var secrets corev1.SecretList
	_ = c.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm"})
	if len(secrets.Items) != 0 {
		t.Errorf("release records left: %d", len(secrets.Items))
	}
}

// helmFor is Helm's SDK configured for the API server of kubeconfig, in the
// release's namespace, keeping releases in Secrets as helm does.
func helmFor(t *testing.T, kubeconfig []byte) *action.Configuration {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	helm := new(action.Configuration)
	if err := helm.Init(kube.GetConfig(path, "", namespace), namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return helm
}
