// Package chartcheck renders charts/retryguard with Helm's own engine and
// holds it to the generated kustomize configuration: the chart's RBAC and
// webhooks must say what config/rbac and config/webhook say.
package chartcheck

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

const root = "../.."

type object = map[string]any

func render(t *testing.T) map[string][]object {
	t.Helper()
	chart, err := loader.Load(filepath.Join(root, "charts", "retryguard"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := chartutil.ToRenderValues(chart, nil,
		chartutil.ReleaseOptions{Name: "rg", Namespace: "retryguard-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chart, values)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]object{}
	for name, text := range files {
		for _, doc := range strings.Split(text, "\n---") {
			if strings.TrimSpace(doc) == "" || strings.HasSuffix(name, ".tpl") {
				continue
			}
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s does not render to YAML: %v\n%s", name, err, doc)
			}
			if o == nil {
				continue
			}
			kind, _ := o["kind"].(string)
			meta, _ := o["metadata"].(object)
			if kind == "" || o["apiVersion"] == nil || meta["name"] == nil {
				t.Fatalf("%s renders an object without apiVersion, kind or name:\n%s", name, doc)
			}
			byKind[kind] = append(byKind[kind], o)
		}
	}
	for _, crd := range chart.CRDObjects() {
		var o object
		if err := yaml.Unmarshal(crd.File.Data, &o); err != nil || o["kind"] != "CustomResourceDefinition" {
			t.Fatalf("crds/%s: %v", crd.Name, err)
		}
		byKind["CustomResourceDefinition"] = append(byKind["CustomResourceDefinition"], o)
	}
	return byKind
}

func load(t *testing.T, path string) object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var o object
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(string(raw), "---\n")), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestChartRendersEveryKind(t *testing.T) {
	byKind := render(t)
	var kinds []string
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	want := []string{"Certificate", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment",
		"Issuer", "Role", "RoleBinding", "Service", "ServiceAccount", "ValidatingWebhookConfiguration"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if n := len(byKind["CustomResourceDefinition"]); n != 2 {
		t.Fatalf("%d CRDs", n)
	}
	args := byKind["Deployment"][0]["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)[0].(object)["args"].([]any)
	for _, want := range []string{"--max-leaf-attempts=3", "--max-retry-percent=10", "--leader-elect=true"} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("the manager's args %v lack %s", args, want)
		}
	}
}

func TestChartRBACIsTheGeneratedRole(t *testing.T) {
	role := byName(render(t)["ClusterRole"], "rg-retryguard")
	generated := load(t, "config/rbac/role.yaml")
	if !reflect.DeepEqual(role["rules"], generated["rules"]) {
		t.Fatalf("the chart's ClusterRole rules differ from config/rbac/role.yaml:\n%v\n%v", role["rules"], generated["rules"])
	}
}

func TestChartWebhooksAreTheGeneratedOnes(t *testing.T) {
	chartHooks := render(t)["ValidatingWebhookConfiguration"][0]["webhooks"].([]any)
	generated := load(t, "config/webhook/manifests.yaml")["webhooks"].([]any)
	if len(chartHooks) != len(generated) {
		t.Fatalf("%d webhooks in the chart, %d generated", len(chartHooks), len(generated))
	}
	for i := range generated {
		c, g := chartHooks[i].(object), generated[i].(object)
		for _, field := range []string{"name", "failurePolicy", "sideEffects", "timeoutSeconds", "rules", "admissionReviewVersions"} {
			if !reflect.DeepEqual(c[field], g[field]) {
				t.Errorf("webhook %v: %s is %v in the chart, %v generated", g["name"], field, c[field], g[field])
			}
		}
		cp := c["clientConfig"].(object)["service"].(object)["path"]
		gp := g["clientConfig"].(object)["service"].(object)["path"]
		if cp != gp {
			t.Errorf("webhook %v: path %v in the chart, %v generated", g["name"], cp, gp)
		}
	}
}

func byName(objs []object, name string) object {
	for _, o := range objs {
		if o["metadata"].(object)["name"] == name {
			return o
		}
	}
	return nil
}
