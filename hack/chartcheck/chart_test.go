// Package chartcheck holds charts/retryguard to what a user gets: it lints the
// chart strictly, renders it as `helm template` does (with and without
// cert-manager), checks that the values schema refuses bad values, holds the
// rendering to the generated kustomize configuration (RBAC, webhooks, the
// ValidatingAdmissionPolicy), and installs, upgrades and uninstalls it
// against a real API server with Helm's own SDK.
package chartcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

const (
	root      = "../.."
	release   = "rg"
	namespace = "retryguard-system"
)

var chartDir = filepath.Join(root, "charts", "retryguard")

type object = map[string]any

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// values parses --set style assignments.
func values(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

// template renders the chart as `helm template rg charts/retryguard -n
// retryguard-system --set ...` does, schema validation included.
func template(t *testing.T, sets ...string) (map[string][]object, error) {
	t.Helper()
	return templateAs(t, release, sets...)
}

// templateAs renders the chart as `helm template <name> ...` does.
func templateAs(t *testing.T, name string, sets ...string) (map[string][]object, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.IncludeCRDs = true, true, true
	install.ReleaseName, install.Namespace = name, namespace
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	rel, err := install.Run(loadChart(t), values(t, sets...))
	if err != nil {
		return nil, err
	}
	return splitObjects(t, rel.Manifest), nil
}

func mustTemplate(t *testing.T, sets ...string) map[string][]object {
	t.Helper()
	byKind, err := template(t, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return byKind
}

func splitObjects(t *testing.T, manifest string) map[string][]object {
	t.Helper()
	byKind := map[string][]object{}
	for _, doc := range strings.Split(manifest, "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("does not render to YAML: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		kind, _ := o["kind"].(string)
		meta, _ := o["metadata"].(object)
		if kind == "" || o["apiVersion"] == nil || meta["name"] == nil {
			t.Fatalf("an object without apiVersion, kind or name:\n%s", doc)
		}
		byKind[kind] = append(byKind[kind], o)
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

func kinds(byKind map[string][]object) []string {
	var out []string
	for k := range byKind {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// `helm lint --strict`: no message at all, not even informational ones
// that strict mode turns into failures (warnings and errors).
func TestChartLintsStrictly(t *testing.T) {
	for _, sets := range [][]string{nil, {"webhook.certManager.enabled=false"}} {
		linter := lint.AllWithKubeVersion(chartDir, values(t, sets...), namespace, nil)
		for _, m := range linter.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%v: %s", sets, m)
			}
		}
	}
}

// Bad values are refused by the schema, by lint and by template alike.
func TestChartRefusesBadValues(t *testing.T) {
	for _, set := range []string{"replicas=abc", "image.tag=", "replicas=0", "image.pullPolicy=Sometimes",
		"limits.maxRetryPercent=101", "limits.maxLeafAttempts=0", "webhook.certManager.enabled=maybe",
		"certManager.enabled=false", "metrics.port=80"} {
		if _, err := template(t, set); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("helm template --set %s: %v, want a schema refusal", set, err)
		}
		linter := lint.AllWithKubeVersion(chartDir, values(t, set), namespace, nil)
		if linter.HighestSeverity < support.WarningSev {
			t.Errorf("helm lint --strict --set %s passes", set)
		}
	}
}

func TestChartImageTagDefaultsToAppVersion(t *testing.T) {
	c := loadChart(t)
	for sets, want := range map[string]string{"": "retryguard/manager:" + c.Metadata.AppVersion, "image.tag=v9": "retryguard/manager:v9"} {
		var s []string
		if sets != "" {
			s = []string{sets}
		}
		if got := container(mustTemplate(t, s...))["image"]; got != want {
			t.Errorf("--set %q: image %v, want %s", sets, got, want)
		}
	}
}

func container(byKind map[string][]object) object {
	return byKind["Deployment"][0]["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)[0].(object)
}

func args(byKind map[string][]object) []any { return container(byKind)["args"].([]any) }

func TestChartRendersWithCertManager(t *testing.T) {
	byKind := mustTemplate(t)
	want := []string{"Certificate", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment",
		"Issuer", "MutatingWebhookConfiguration", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"}
	if got := kinds(byKind); !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	if n := len(byKind["CustomResourceDefinition"]); n != 2 {
		t.Fatalf("%d CRDs", n)
	}
	for _, want := range []string{"--max-leaf-attempts=3", "--max-retry-percent=10", "--leader-elect=true",
		"--metrics-secure=true", "--enable-http2=false"} {
		if !slices.Contains(args(byKind), any(want)) {
			t.Errorf("the manager's args %v lack %s", args(byKind), want)
		}
	}
	if slices.Contains(args(byKind), any("--cert-rotation")) {
		t.Error("the manager rotates its own certificate although cert-manager issues it")
	}
	for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		meta := byKind[kind][0]["metadata"].(object)
		if meta["annotations"].(object)["cert-manager.io/inject-ca-from"] != namespace+"/rg-retryguard-serving-cert" {
			t.Errorf("no CA injection from cert-manager into the %s: %v", kind, meta)
		}
	}
	c, _ := container(byKind)["image"].(string)
	proxyImage := "--proxy-image=retryguard/proxy:" + strings.TrimPrefix(c, "retryguard/manager:")
	if !slices.Contains(args(byKind), any(proxyImage)) {
		t.Errorf("the manager's args %v lack %s (the sidecar at the manager's version)", args(byKind), proxyImage)
	}
}

// The chart's injector configuration is config/webhook/proxy_injector.yaml's,
// but for the release's names and the release's namespace, which it also
// keeps out of injection.
func TestChartInjectorIsConfigs(t *testing.T) {
	chart := mustTemplate(t)["MutatingWebhookConfiguration"]
	if len(chart) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations in the chart", len(chart))
	}
	c := chart[0]["webhooks"].([]any)[0].(object)
	g := load(t, "config/webhook/proxy_injector.yaml")["webhooks"].([]any)[0].(object)
	for _, field := range []string{"name", "failurePolicy", "sideEffects", "timeoutSeconds", "rules", "admissionReviewVersions",
		"matchConditions", "reinvocationPolicy"} {
		if !reflect.DeepEqual(c[field], g[field]) {
			t.Errorf("%s is %v in the chart, %v in config/", field, c[field], g[field])
		}
	}
	if cp, gp := c["clientConfig"].(object)["service"].(object)["path"], g["clientConfig"].(object)["service"].(object)["path"]; cp != gp ||
		cp != "/inject-retryguard-proxy" {
		t.Errorf("path %v in the chart, %v in config/", cp, gp)
	}
	if sel := fmt.Sprint(c["namespaceSelector"]); !strings.Contains(sel, namespace) || !strings.Contains(sel, "kube-system") {
		t.Errorf("the chart injects into its own namespace or kube-system: %s", sel)
	}
}

func TestChartRendersWithoutCertManager(t *testing.T) {
	byKind := mustTemplate(t, "webhook.certManager.enabled=false")
	for _, k := range []string{"Certificate", "Issuer"} {
		if len(byKind[k]) > 0 {
			t.Errorf("a %s without cert-manager", k)
		}
	}
	if byName(byKind["Secret"], "rg-retryguard-webhook-cert") == nil {
		t.Error("no Secret for the manager to write its certificate into")
	}
	for _, want := range []string{"--cert-rotation", "--cert-secret=rg-retryguard-webhook-cert",
		"--webhook-service=rg-retryguard-webhook", "--webhook-configuration=rg-retryguard"} {
		if !slices.Contains(args(byKind), any(want)) {
			t.Errorf("the manager's args %v lack %s", args(byKind), want)
		}
	}
	if byName(byKind["Service"], "rg-retryguard-webhook") == nil || byName(byKind["ValidatingWebhookConfiguration"], "rg-retryguard") == nil {
		t.Error("the flags name a Service or webhook configuration the chart does not render")
	}
	if _, ok := byKind["ValidatingWebhookConfiguration"][0]["metadata"].(object)["annotations"]; ok {
		t.Error("a cert-manager annotation without cert-manager")
	}
	if byName(byKind["Role"], "rg-retryguard-cert-rotation") == nil || byName(byKind["ClusterRole"], "rg-retryguard-cert-rotation") == nil {
		t.Error("no RBAC for the certificate rotation")
	}
}

func TestChartOptionalObjects(t *testing.T) {
	byKind := mustTemplate(t, "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
		"networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
		"podDisruptionBudget.enabled=false", "validatingAdmissionPolicy.enabled=false")
	for _, k := range []string{"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} {
		if len(byKind[k]) != 1 {
			t.Errorf("%d %s", len(byKind[k]), k)
		}
	}
	for _, k := range []string{"PodDisruptionBudget", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if len(byKind[k]) != 0 {
			t.Errorf("%s although disabled", k)
		}
	}
	var alerts []string
	for _, g := range byKind["PrometheusRule"][0]["spec"].(object)["groups"].([]any) {
		for _, r := range g.(object)["rules"].([]any) {
			if a, ok := r.(object)["alert"].(string); ok {
				alerts = append(alerts, a)
			}
		}
	}
	want := []string{"RetryguardManagerDown", "RetryguardNoLeader", "RetryguardWebhookErrors", "RetryguardWebhookCertificateExpiresSoon",
		"RetryguardPoliciesNotReady", "RetryguardRetryBudgetExhausted", "RetryguardRetryRecoveryLag", "RetryguardOperationLatencyAboveSLA",
		"RetryguardPayloadsRejected", "RetryguardProxyDeadLettersDropped"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// The NetworkPolicy opens the webhook port to the control plane's addresses
// only, and cannot be turned on without them: the webhook fails closed, so
// a policy that shut the API server out would refuse every write.
func TestChartNetworkPolicyOpensTheWebhookToTheControlPlaneOnly(t *testing.T) {
	if _, err := template(t, "networkPolicy.enabled=true"); err == nil || !strings.Contains(err.Error(), "networkPolicy.webhookFrom must name") {
		t.Fatalf("enabled without webhookFrom: %v, want a refusal naming networkPolicy.webhookFrom", err)
	}
	byKind := mustTemplate(t, "networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28")
	for _, rule := range byKind["NetworkPolicy"][0]["spec"].(object)["ingress"].([]any) {
		r := rule.(object)
		for _, p := range r["ports"].([]any) {
			if p.(object)["port"] != "webhook" {
				continue
			}
			from, _ := r["from"].([]any)
			if len(from) != 1 || from[0].(object)["ipBlock"].(object)["cidr"] != "10.0.0.0/28" {
				t.Fatalf("the webhook port is open to %v, want the control plane's 10.0.0.0/28 only", from)
			}
			return
		}
	}
	t.Fatal("no rule for the webhook port")
}

// A client CA mounts beside the serving certificate and turns on client
// certificate authentication.
func TestChartWebhookClientCA(t *testing.T) {
	byKind := mustTemplate(t, "webhook.clientCA.configMapName=apiserver-webhook-client-ca")
	dep := byKind["Deployment"][0]
	spec := dep["spec"].(object)["template"].(object)["spec"].(object)
	args := fmt.Sprint(spec["containers"].([]any)[0].(object)["args"])
	if !strings.Contains(args, "--webhook-client-ca-name=client-ca.crt") {
		t.Errorf("args %s lack --webhook-client-ca-name", args)
	}
	vol := fmt.Sprint(spec["volumes"])
	if !strings.Contains(vol, "apiserver-webhook-client-ca") || !strings.Contains(vol, "client-ca.crt") {
		t.Errorf("volumes %s do not project the client CA", vol)
	}
	if plain := fmt.Sprint(mustTemplate(t)["Deployment"][0]); strings.Contains(plain, "client-ca") {
		t.Error("a client CA without clientCA.configMapName")
	}
}

func TestChartRBACIsTheGeneratedRole(t *testing.T) {
	byKind := mustTemplate(t)
	for name, path := range map[string]string{
		"rg-retryguard":                "config/rbac/role.yaml",
		"rg-retryguard-metrics-auth":   "config/rbac/metrics_auth_role.yaml",
		"rg-retryguard-metrics-reader": "config/rbac/metrics_reader_role.yaml",
	} {
		role := byName(byKind["ClusterRole"], name)
		if generated := load(t, path); role == nil || !reflect.DeepEqual(role["rules"], generated["rules"]) {
			t.Errorf("the chart's ClusterRole %s differs from %s:\n%v\n%v", name, path, role, generated["rules"])
		}
	}
	// Without cert-manager, the rotation's rules are config/components/cert-rotation's
	// (but for the names the release gives the Secret and the webhook configuration).
	rotation := mustTemplate(t, "webhook.certManager.enabled=false")
	component := loadObjects(t, "config/components/cert-rotation/rbac.yaml")
	for i, o := range []object{byName(rotation["Role"], "rg-retryguard-cert-rotation"), byName(rotation["ClusterRole"], "rg-retryguard-cert-rotation")} {
		want := strings.NewReplacer(
			"retryguard-webhook-cert",
			"rg-retryguard-webhook-cert",
			"retryguard-validating-webhook-configuration",
			"rg-retryguard",
			"retryguard-proxy-injector",
			"rg-retryguard-proxy-injector",
		).Replace(fmt.Sprint(component[2*i]["rules"]))
		if o == nil || fmt.Sprint(o["rules"]) != want {
			t.Errorf("the chart's certificate rotation rules differ from config/components/cert-rotation:\n%v\n%v", o, want)
		}
	}
	role := byName(byKind["Role"], "rg-retryguard-leader-election")
	if generated := load(t, "config/rbac/leader_election_role.yaml"); role == nil || !reflect.DeepEqual(role["rules"], generated["rules"]) {
		t.Errorf("the chart's leader election Role differs from config/rbac")
	}
}

func TestChartWebhooksAreTheGeneratedOnes(t *testing.T) {
	chartHooks := mustTemplate(t)["ValidatingWebhookConfiguration"][0]["webhooks"].([]any)
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

// The chart's ValidatingAdmissionPolicy is config/vap's, but for the
// operator's user, which names the release's ServiceAccount.
func TestChartAdmissionPolicyIsConfigs(t *testing.T) {
	chartSpec := mustTemplate(t)["ValidatingAdmissionPolicy"][0]["spec"].(object)
	configSpec := load(t, "config/vap/validating_admission_policy.yaml")["spec"].(object)
	for _, spec := range []object{chartSpec, configSpec} {
		spec["variables"] = slices.DeleteFunc(spec["variables"].([]any), func(v any) bool { return v.(object)["name"] == "operator" })
	}
	if !reflect.DeepEqual(chartSpec, configSpec) {
		t.Errorf("the chart's ValidatingAdmissionPolicy differs from config/vap:\n%v\n%v", chartSpec, configSpec)
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

// TestManagerGoMemLimitIsItsMemoryLimit: the chart and config/manager give
// the manager GOMEMLIMIT from its own container's memory limit (the downward
// API, in bytes), so that the Go runtime collects harder as it nears the
// limit instead of letting the heap double past it (docs/benchmarks.md, the
// manager at scale), and both deploy the same resources.
func TestManagerGoMemLimitIsItsMemoryLimit(t *testing.T) {
	want := object{"containerName": "manager", "resource": "limits.memory"}
	chart, kust := container(mustTemplate(t)), container(kustomize(t, "config/default"))
	for source, c := range map[string]object{"the chart": chart, "config/default": kust} {
		var ref any
		for _, e := range c["env"].([]any) {
			if e := e.(object); e["name"] == "GOMEMLIMIT" {
				ref = e["valueFrom"].(object)["resourceFieldRef"]
			}
		}
		if !reflect.DeepEqual(ref, any(want)) {
			t.Errorf("%s: GOMEMLIMIT from %v, want resourceFieldRef %v", source, ref, want)
		}
	}
	if !reflect.DeepEqual(chart["resources"], kust["resources"]) {
		t.Errorf("resources: the chart's %v, config/default's %v", chart["resources"], kust["resources"])
	}
}

// The chart's CRDs are config/crd/bases' (their one home, which
// hack/chart-crds.sh copies in): the same spec, under crds.enabled, kept on
// uninstall under crds.keep, labelled as the release's.
func TestChartCRDsAreTheGenerated(t *testing.T) {
	byKind := mustTemplate(t)
	for _, path := range []string{"config/crd/bases/policy.retryguard.io_retrypolicies.yaml", "config/crd/bases/policy.retryguard.io_retrybudgets.yaml"} {
		generated := load(t, path)
		name := generated["metadata"].(object)["name"].(string)
		crd := byName(byKind["CustomResourceDefinition"], name)
		if crd == nil {
			t.Fatalf("the chart does not render %s", name)
		}
		if !reflect.DeepEqual(crd["spec"], generated["spec"]) {
			t.Errorf("the chart's %s differs from %s: run make manifests", name, path)
		}
		meta := crd["metadata"].(object)
		if meta["annotations"].(object)["helm.sh/resource-policy"] != "keep" || meta["labels"].(object)["app.kubernetes.io/component"] != "crds" ||
			meta["labels"].(object)["app.kubernetes.io/instance"] != release {
			t.Errorf("%s: metadata %v", name, meta)
		}
	}
	for _, crd := range mustTemplate(t, "crds.keep=false")["CustomResourceDefinition"] {
		if _, ok := crd["metadata"].(object)["annotations"]; ok {
			t.Errorf("crds.keep=false: %v", crd["metadata"])
		}
	}
	if crds := mustTemplate(t, "crds.enabled=false")["CustomResourceDefinition"]; len(crds) != 0 {
		t.Errorf("crds.enabled=false renders %d CRDs", len(crds))
	}
	if len(loadChart(t).CRDObjects()) != 0 {
		t.Error("the chart still has a crds/ directory, which helm upgrade never upgrades")
	}
}
