package chartcheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/retryguard/retryguard/webhooks"
)

func podSpec(byKind map[string][]object) object {
	return byKind["Deployment"][0]["spec"].(object)["template"].(object)["spec"].(object)
}

func podMeta(byKind map[string][]object) object {
	return byKind["Deployment"][0]["spec"].(object)["template"].(object)["metadata"].(object)
}

// The standard fullname: <release>-retryguard, the release alone when it
// holds the name (not retryguard-retryguard), and both overrides.
func TestChartNames(t *testing.T) {
	for _, tc := range []struct {
		release string
		sets    []string
		want    string
		label   string
	}{
		{"rg", nil, "rg-retryguard", "retryguard"},
		{"retryguard", nil, "retryguard", "retryguard"},
		{"retryguard-prod", nil, "retryguard-prod", "retryguard"},
		{"rg", []string{"nameOverride=guard"}, "rg-guard", "guard"},
		{"rg", []string{"fullnameOverride=policy-operator"}, "policy-operator", "retryguard"},
	} {
		byKind, err := templateAs(t, tc.release, append([]string{"webhook.certManager.enabled=false"}, tc.sets...)...)
		if err != nil {
			t.Fatal(err)
		}
		dep := byKind["Deployment"][0]["metadata"].(object)
		if dep["name"] != tc.want || dep["labels"].(object)["app.kubernetes.io/name"] != tc.label {
			t.Errorf("release %s %v: Deployment %v labelled %v, want %s labelled %s", tc.release, tc.sets, dep["name"], dep["labels"], tc.want, tc.label)
		}
		for kind, name := range map[string]string{"Service": tc.want + "-metrics", "ServiceAccount": tc.want, "ValidatingWebhookConfiguration": tc.want,
			"Secret": tc.want + "-webhook-cert"} {
			if byName(byKind[kind], name) == nil {
				t.Errorf("release %s %v: no %s %s", tc.release, tc.sets, kind, name)
			}
		}
		if !slices.Contains(args(byKind), any("--cert-secret="+tc.want+"-webhook-cert")) {
			t.Errorf("release %s %v: args %v", tc.release, tc.sets, args(byKind))
		}
		sel := byKind["Deployment"][0]["spec"].(object)["selector"].(object)["matchLabels"].(object)
		if sel["app.kubernetes.io/name"] != tc.label || podMeta(byKind)["labels"].(object)["app.kubernetes.io/name"] != tc.label {
			t.Errorf("release %s %v: selector %v", tc.release, tc.sets, sel)
		}
	}
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Each pod value reaches the Deployment; the defaults add nothing.
func TestChartPodValues(t *testing.T) {
	plain := mustTemplate(t)
	for _, key := range []string{"imagePullSecrets", "priorityClassName"} {
		if _, ok := podSpec(plain)[key]; ok {
			t.Errorf("%s rendered by default", key)
		}
	}
	if !slices.Contains(args(plain), any("--zap-log-level=info")) {
		t.Errorf("default args %v lack --zap-log-level=info", args(plain))
	}
	if fmt.Sprint(podSpec(plain)["affinity"]) == "" || podSpec(plain)["affinity"].(object)["podAntiAffinity"] == nil {
		t.Errorf("the default anti-affinity is gone: %v", podSpec(plain)["affinity"])
	}
	byKind := mustTemplate(t, "image.digest="+digest, "imagePullSecrets[0].name=regcred", "podAnnotations.example\\.com/team=payments",
		"podLabels.team=payments", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"tolerations[0].key=dedicated", "tolerations[0].operator=Exists", "nodeSelector.disk=ssd", "priorityClassName=system-cluster-critical",
		"logLevel=debug", "extraArgs[0]=--max-concurrent-reconciles=8")
	spec, meta := podSpec(byKind), podMeta(byKind)
	for what, ok := range map[string]bool{
		"image by digest":  container(byKind)["image"] == "retryguard/manager@"+digest,
		"imagePullSecrets": fmt.Sprint(spec["imagePullSecrets"]) == "[map[name:regcred]]",
		"podAnnotations": meta["annotations"].(object)["example.com/team"] == "payments" &&
			meta["annotations"].(object)["kubectl.kubernetes.io/default-container"] == "manager",
		"podLabels":          meta["labels"].(object)["team"] == "payments" && meta["labels"].(object)["app.kubernetes.io/instance"] == release,
		"affinity replaced":  spec["affinity"].(object)["nodeAffinity"] != nil && spec["affinity"].(object)["podAntiAffinity"] == nil,
		"tolerations":        fmt.Sprint(spec["tolerations"]) == "[map[key:dedicated operator:Exists]]",
		"nodeSelector":       fmt.Sprint(spec["nodeSelector"]) == "map[disk:ssd]",
		"priorityClassName":  spec["priorityClassName"] == "system-cluster-critical",
		"logLevel":           slices.Contains(args(byKind), any("--zap-log-level=debug")),
		"extraArgs last":     args(byKind)[len(args(byKind))-1] == "--max-concurrent-reconciles=8",
		"selector unchanged": fmt.Sprint(byKind["Deployment"][0]["spec"].(object)["selector"]) == fmt.Sprint(plain["Deployment"][0]["spec"].(object)["selector"]),
	} {
		if !ok {
			t.Errorf("%s: not rendered as set:\n%v\n%v", what, meta, spec)
		}
	}
	if level := mustTemplate(t, "logLevel=4"); !slices.Contains(args(level), any("--zap-log-level=4")) {
		t.Errorf("logLevel=4: args %v", args(level))
	}
	for _, bad := range []string{"logLevel=loud", "logLevel=0", "image.digest=latest", "extraArgs[0]=max", "imagePullSecrets[0].other=x",
		"nameOverride=" + strings.Repeat("a", 64)} {
		if _, err := template(t, bad); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("--set %s: %v, want a schema refusal", bad, err)
		}
	}
}

// The ServiceMonitor verifies the endpoint's certificate (the webhook's,
// which names the metrics Service) with the CA of the webhook's Secret and
// presents a token the API server authorizes: no insecureSkipVerify, no
// bearerTokenFile.
func TestChartServiceMonitorVerifiesAndAuthorizes(t *testing.T) {
	for _, certManager := range []string{"true", "false"} {
		byKind := mustTemplate(t, "metrics.serviceMonitor.enabled=true", "webhook.certManager.enabled="+certManager)
		ep := byKind["ServiceMonitor"][0]["spec"].(object)["endpoints"].([]any)[0].(object)
		text := fmt.Sprint(ep)
		if strings.Contains(text, "insecureSkipVerify") || strings.Contains(text, "bearerTokenFile") {
			t.Errorf("endpoint %v", ep)
		}
		tls := ep["tlsConfig"].(object)
		const host = "rg-retryguard-metrics." + namespace + ".svc"
		if tls["serverName"] != host || fmt.Sprint(tls["ca"]) != "map[secret:map[key:ca.crt name:rg-retryguard-webhook-cert]]" {
			t.Errorf("tlsConfig %v", tls)
		}
		if fmt.Sprint(ep["authorization"]) != "map[credentials:map[key:token name:rg-retryguard-metrics-scraper-token] type:Bearer]" {
			t.Errorf("authorization %v", ep["authorization"])
		}
		if !slices.Contains(args(byKind), any("--metrics-cert-dir=/tmp/k8s-webhook-server/serving-certs")) {
			t.Errorf("the metrics endpoint does not serve the webhook's certificate: %v", args(byKind))
		}
		if certManager == "true" {
			names := byKind["Certificate"][0]["spec"].(object)["dnsNames"].([]any)
			if !slices.Contains(names, any(host)) {
				t.Errorf("the certificate names %v, not %s", names, host)
			}
		} else if !slices.Contains(args(byKind), any("--webhook-cert-dns-names="+host)) {
			t.Errorf("the rotated certificate does not name %s: %v", host, args(byKind))
		}
		sa, secret, crb := byName(byKind["ServiceAccount"], "rg-retryguard-metrics-scraper"), byName(byKind["Secret"], "rg-retryguard-metrics-scraper-token"),
			byName(byKind["ClusterRoleBinding"], "rg-retryguard-metrics-scraper")
		if sa == nil || secret == nil || secret["type"] != "kubernetes.io/service-account-token" || crb == nil ||
			crb["roleRef"].(object)["name"] != "rg-retryguard-metrics-reader" {
			t.Errorf("the scraper's account, token or binding: %v %v %v", sa, secret, crb)
		}
	}
	own := mustTemplate(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.tokenSecret=prometheus-token")
	if byName(own["ServiceAccount"], "rg-retryguard-metrics-scraper") != nil {
		t.Error("a scraper account although tokenSecret names one")
	}
	if ep := fmt.Sprint(own["ServiceMonitor"][0]["spec"].(object)["endpoints"]); !strings.Contains(ep, "name:prometheus-token") {
		t.Errorf("endpoints %s", ep)
	}
	plain := mustTemplate(t, "metrics.serviceMonitor.enabled=true", "metrics.secure=false")
	if ep := fmt.Sprint(plain["ServiceMonitor"][0]["spec"].(object)["endpoints"]); strings.Contains(ep, "authorization") || strings.Contains(ep, "tlsConfig") {
		t.Errorf("plain HTTP endpoint %s", ep)
	}
}

// The sidecar's image is pinned by digest when one is set, as the manager's is.
func TestChartProxyImageDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, a := range args(mustTemplate(t, "proxy.image.digest="+digest)) {
		if strings.HasPrefix(a.(string), "--proxy-image=") {
			if a != "--proxy-image=retryguard/proxy@"+digest {
				t.Fatalf("%s, want the image by digest", a)
			}
			return
		}
	}
	t.Fatal("no --proxy-image argument")
}

// The PodMonitor scrapes the labelled application pods' named port.
func TestChartPodMonitor(t *testing.T) {
	if len(mustTemplate(t)["PodMonitor"]) != 0 {
		t.Error("a PodMonitor by default")
	}
	pm := mustTemplate(t, "metrics.podMonitor.enabled=true")["PodMonitor"][0]["spec"].(object)
	if fmt.Sprint(pm["namespaceSelector"]) != "map[any:true]" || fmt.Sprint(pm["selector"]) != "map[matchLabels:map[retryguard.io/metrics:true]]" ||
		fmt.Sprint(pm["podMetricsEndpoints"]) != "[map[interval:30s path:/metrics port:metrics]]" {
		t.Errorf("PodMonitor %v", pm)
	}
	// The second scrapes every injected sidecar by the injector's label and
	// the sidecar's metrics port, the webhooks package's one home of both.
	proxies := mustTemplate(t, "metrics.podMonitor.enabled=true")["PodMonitor"][1]["spec"].(object)
	if fmt.Sprint(proxies["selector"]) != fmt.Sprintf("map[matchLabels:map[%s:%s]]", webhooks.InjectedLabel, webhooks.InjectedLabelValue) ||
		!strings.Contains(fmt.Sprint(proxies["podMetricsEndpoints"]), "port:"+webhooks.ProxyMetricsPortName) ||
		fmt.Sprint(proxies["namespaceSelector"]) != "map[any:true]" {
		t.Errorf("the sidecars' PodMonitor %v", proxies)
	}
	pm = mustTemplate(t, "metrics.podMonitor.enabled=true", "metrics.podMonitor.namespaces={shop,sms}",
		"metrics.podMonitor.port=http")["PodMonitor"][0]["spec"].(object)
	if fmt.Sprint(pm["namespaceSelector"]) != "map[matchNames:[shop sms]]" || !strings.Contains(fmt.Sprint(pm["podMetricsEndpoints"]), "port:http") {
		t.Errorf("PodMonitor %v", pm)
	}
}

// The values, installed and upgraded through Helm's SDK against a real API
// server: what the Deployment holds is what was set.
func TestHelmInstallUpgradeWithValues(t *testing.T) {
	env, _, c := startEnv(t, false)
	helm := helmFor(t, env.KubeConfig)
	ctx := context.Background()
	install := action.NewInstall(helm)
	install.ReleaseName, install.Namespace, install.CreateNamespace = "retryguard", namespace, true
	install.SkipCRDs = true // startEnv installed them
	if _, err := install.Run(loadChart(t), values(t, "webhook.certManager.enabled=false", "image.digest="+digest, "imagePullSecrets[0].name=regcred",
		"podAnnotations.team=payments", "podLabels.tier=control", "priorityClassName=system-cluster-critical", "logLevel=debug",
		"extraArgs[0]=--max-concurrent-reconciles=8", "nodeSelector.disk=ssd", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
		"affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
		"affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=zone")); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	// release retryguard: the objects are retryguard, not retryguard-retryguard.
	if err := c.Get(ctx, clientKey(namespace, "retryguard"), &d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template
	got := []bool{
		pod.Spec.Containers[0].Image == "retryguard/manager@"+digest,
		len(pod.Spec.ImagePullSecrets) == 1 && pod.Spec.ImagePullSecrets[0].Name == "regcred",
		pod.Annotations["team"] == "payments",
		pod.Labels["tier"] == "control",
		pod.Spec.PriorityClassName == "system-cluster-critical",
		slices.Contains(pod.Spec.Containers[0].Args, "--zap-log-level=debug"),
		slices.Contains(pod.Spec.Containers[0].Args, "--max-concurrent-reconciles=8"),
		pod.Spec.NodeSelector["disk"] == "ssd",
		len(pod.Spec.Tolerations) == 1 && pod.Spec.Tolerations[0].Key == "dedicated",
		pod.Spec.Affinity != nil && pod.Spec.Affinity.PodAffinity != nil && pod.Spec.Affinity.PodAntiAffinity == nil,
	}
	if slices.Contains(got, false) {
		t.Errorf("installed pod template %v: %+v", got, pod)
	}
	for _, name := range []string{"retryguard-webhook", "retryguard-metrics"} {
		if err := c.Get(ctx, clientKey(namespace, name), &corev1.Service{}); err != nil {
			t.Errorf("Service %s: %v", name, err)
		}
	}

	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace, upgrade.ReuseValues = namespace, true
	if _, err := upgrade.Run("retryguard", loadChart(t), values(t, "logLevel=error", "podAnnotations.team=ledger", "image.digest=")); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, clientKey(namespace, "retryguard"), &d); err != nil {
		t.Fatal(err)
	}
	pod = d.Spec.Template
	if !slices.Contains(pod.Spec.Containers[0].Args, "--zap-log-level=error") || pod.Annotations["team"] != "ledger" ||
		pod.Spec.Containers[0].Image != "retryguard/manager:"+loadChart(t).Metadata.AppVersion || pod.Spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("after the upgrade: args %v, annotations %v, image %s", pod.Spec.Containers[0].Args, pod.Annotations, pod.Spec.Containers[0].Image)
	}
	if _, err := action.NewUninstall(helm).Run("retryguard"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, clientKey(namespace, "retryguard"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment after uninstall: %v", err)
	}
}
