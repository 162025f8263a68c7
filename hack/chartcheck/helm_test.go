package chartcheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
)

// helm install, upgrade and uninstall, through Helm's SDK, against a real API
// server without the CRDs: Helm creates every object, the CRDs among them (as
// templates); an upgrade with --reset-then-reuse-values that changes a value
// changes the Deployment, and one whose chart changes a CRD changes the CRD
// the API server serves; an uninstall removes everything but the CRDs
// (crds.keep), and, with crds.keep=false, the CRDs too.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	env, c := startBareEnv(t)
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
		{ns("rg-retryguard"), &corev1.ServiceAccount{}},
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
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, cluster(name), &crd); err != nil {
			t.Errorf("CRD %s: %v", name, err)
		} else if crd.Annotations["helm.sh/resource-policy"] != "keep" || crd.Labels["app.kubernetes.io/component"] != "crds" {
			t.Errorf("CRD %s: annotations %v, labels %v", name, crd.Annotations, crd.Labels)
		}
	}
	for _, want := range installed {
		if err := c.Get(ctx, want.key, want.obj); err != nil {
			t.Errorf("%T %s: %v", want.obj, want.key, err)
		}
	}

	// The README's upgrade, with a chart whose RetryPolicy CRD has a new
	// printer column: helm upgrade rg charts/retryguard --reset-then-reuse-values
	//   --set limits.maxLeafAttempts=5
	next := loadChart(t)
	const column = "    - jsonPath: .spec.target.port\n      name: Port\n      type: integer\n"
	changed := false
	for _, f := range next.Templates {
		if f.Name == "templates/crd-policy.retryguard.io_retrypolicies.yaml" {
			text := string(f.Data)
			i := strings.Index(text, "  - additionalPrinterColumns:\n")
			if i < 0 {
				t.Fatal("the RetryPolicy CRD has no printer columns to add one to")
			}
			i += len("  - additionalPrinterColumns:\n")
			f.Data, changed = []byte(text[:i]+column+text[i:]), true
		}
	}
	if !changed {
		t.Fatal("no RetryPolicy CRD template in the chart")
	}
	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace, upgrade.ResetThenReuseValues = namespace, true
	if _, err := upgrade.Run(release, next, values(t, "limits.maxLeafAttempts=5")); err != nil {
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
	var policies apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, cluster(crds[0]), &policies); err != nil {
		t.Fatal(err)
	}
	if cols := policies.Spec.Versions[0].AdditionalPrinterColumns; len(cols) == 0 || cols[0].Name != "Port" || cols[0].JSONPath != ".spec.target.port" {
		t.Errorf("helm upgrade did not upgrade the CRD: its printer columns are %+v", cols)
	}

	// helm uninstall rg: the CRDs stay (crds.keep), and with them every policy.
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
			t.Errorf("uninstall removed CRD %s although crds.keep: %v", name, err)
		}
	}
	var secrets corev1.SecretList
	_ = c.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm"})
	if len(secrets.Items) != 0 {
		t.Errorf("release records left: %d", len(secrets.Items))
	}

	// Installed again under the same name, the release takes the kept CRDs
	// back (they carry its ownership); upgraded with crds.keep=false, the CRDs
	// lose the annotation, and the uninstall deletes them.
	again := action.NewInstall(helm)
	again.ReleaseName, again.Namespace = release, namespace
	if _, err := again.Run(loadChart(t), values(t, "webhook.certManager.enabled=false")); err != nil {
		t.Fatalf("installing over the kept CRDs: %v", err)
	}
	unkeep := action.NewUpgrade(helm)
	unkeep.Namespace, unkeep.ResetThenReuseValues = namespace, true
	if _, err := unkeep.Run(release, loadChart(t), values(t, "crds.keep=false")); err != nil {
		t.Fatal(err)
	}
	for _, name := range crds {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, cluster(name), &crd); err != nil {
			t.Fatal(err)
		}
		if _, ok := crd.Annotations["helm.sh/resource-policy"]; ok {
			t.Errorf("CRD %s still kept with crds.keep=false: %v", name, crd.Annotations)
		}
	}
	if _, err := action.NewUninstall(helm).Run(release); err != nil {
		t.Fatal(err)
	}
	for _, name := range crds {
		eventually(t, 30*time.Second, "CRD "+name+" deleted with crds.keep=false", func() bool {
			return apierrors.IsNotFound(c.Get(ctx, cluster(name), &apiextensionsv1.CustomResourceDefinition{}))
		})
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
