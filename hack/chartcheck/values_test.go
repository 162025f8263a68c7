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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	cm := mustTemplate(t, "strategy.type=Recreate", "extraEnv[0].name=HTTPS_PROXY", "extraEnv[0].value=http://proxy:3128",
		"volumes[0].name=scratch", "volumes[0].emptyDir.medium=Memory", "volumeMounts[0].name=scratch", "volumeMounts[0].mountPath=/scratch",
		"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
		"topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule", "securityContext.runAsUser=65532", "containerSecurityContext.privileged=false",
		"global.imagePullSecrets[0].name=shared", "global.imagePullSecrets[1].name=regcred", "imagePullSecrets[0].name=regcred",
		"global.priorityClassName=from-global")
	cspec, c := podSpec(cm), container(cm)
	env := c["env"].([]any)
	const podSC = "map[runAsNonRoot:true runAsUser:65532 seccompProfile:map[type:RuntimeDefault]]"
	const containerSC = "map[allowPrivilegeEscalation:false capabilities:map[drop:[ALL]] privileged:false readOnlyRootFilesystem:true]"
	for what, ok := range map[string]bool{
		"strategy":                             fmt.Sprint(cm["Deployment"][0]["spec"].(object)["strategy"]) == "map[type:Recreate]",
		"extraEnv after the chart's":           fmt.Sprint(env[len(env)-1]) == "map[name:HTTPS_PROXY value:http://proxy:3128]" && len(env) == 3,
		"volumes beside cert":                  len(cspec["volumes"].([]any)) == 2 && cspec["volumes"].([]any)[1].(object)["name"] == "scratch",
		"volumeMounts beside cert":             len(c["volumeMounts"].([]any)) == 2 && c["volumeMounts"].([]any)[1].(object)["mountPath"] == "/scratch",
		"topologySpreadConstraints":            strings.Contains(fmt.Sprint(cspec["topologySpreadConstraints"]), "topologyKey:topology.kubernetes.io/zone"),
		"securityContext merged":               fmt.Sprint(cspec["securityContext"]) == podSC,
		"containerSecurityContext":             fmt.Sprint(c["securityContext"]) == containerSC,
		"global pull Secrets first, each once": fmt.Sprint(cspec["imagePullSecrets"]) == "[map[name:shared] map[name:regcred]]",
		"global.priorityClassName":             cspec["priorityClassName"] == "from-global",
	} {
		if !ok {
			t.Errorf("%s: not rendered as set:\n%v\n%v", what, cspec, c)
		}
	}
	if _, ok := podSpec(plain)["topologySpreadConstraints"]; ok {
		t.Error("topologySpreadConstraints rendered by default")
	}
	if fmt.Sprint(podSpec(plain)["securityContext"]) != "map[runAsNonRoot:true seccompProfile:map[type:RuntimeDefault]]" ||
		fmt.Sprint(container(plain)["securityContext"]) != "map[allowPrivilegeEscalation:false capabilities:map[drop:[ALL]] readOnlyRootFilesystem:true]" {
		t.Errorf("the default security contexts: %v %v", podSpec(plain)["securityContext"], container(plain)["securityContext"])
	}
	if _, ok := plain["Deployment"][0]["spec"].(object)["strategy"]; ok {
		t.Error("a strategy by default")
	}
	if own := podSpec(mustTemplate(t, "global.priorityClassName=from-global", "priorityClassName=own")); own["priorityClassName"] != "own" {
		t.Errorf("priorityClassName does not win over global.priorityClassName: %v", own["priorityClassName"])
	}
	if level := mustTemplate(t, "logLevel=4"); !slices.Contains(args(level), any("--zap-log-level=4")) {
		t.Errorf("logLevel=4: args %v", args(level))
	}
	for _, bad := range []string{"logLevel=loud", "logLevel=0", "image.digest=latest", "extraArgs[0]=max", "imagePullSecrets[0].other=x",
		"global.nodeSelector.disk=ssd", "global.imagePullSecrets[0].other=x", "strategy.type=Rolling", "strategy.rollingUpdate.maxSurge=ten",
		"extraEnv[0].value=x", "volumes[0].emptyDir.medium=Memory", "volumeMounts[0].name=x", "topologySpreadConstraints[0].maxSkew=1",
		"crds.enabled=maybe", "crds.other=x", "serviceAccount.create=maybe", "serviceAccount.other=x",
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
	// startEnv applied the CRDs as a chart with crds/ left them: without
	// Helm's ownership. The README's first upgrade to CRDs as templates hands
	// them to the release (kubectl label and annotate), else Helm refuses to
	// take them over.
	for _, name := range []string{"retrypolicies.policy.retryguard.io", "retrybudgets.policy.retryguard.io"} {
		crd := crdMeta()
		if err := c.Get(ctx, clientKey("", name), crd); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(crd.DeepCopy())
		crd.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
		crd.Annotations = map[string]string{"meta.helm.sh/release-name": "retryguard", "meta.helm.sh/release-namespace": namespace}
		if err := c.Patch(ctx, crd, patch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := install.Run(loadChart(t), values(t, "webhook.certManager.enabled=false", "image.digest="+digest, "imagePullSecrets[0].name=regcred",
		"global.imagePullSecrets[0].name=shared", "global.priorityClassName=ignored-when-priorityClassName-is-set",
		"serviceAccount.annotations.example\\.com/role=operator", "strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=0",
		"strategy.rollingUpdate.maxSurge=25%", "extraEnv[0].name=HTTPS_PROXY", "extraEnv[0].value=http://proxy:3128",
		"volumes[0].name=tmp", "volumes[0].emptyDir.medium=Memory", "volumeMounts[0].name=tmp", "volumeMounts[0].mountPath=/tmp/scratch",
		"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
		"topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway", "securityContext.runAsNonRoot=true", "securityContext.runAsUser=65532",
		"containerSecurityContext.readOnlyRootFilesystem=true", "containerSecurityContext.allowPrivilegeEscalation=false",
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
		len(pod.Spec.ImagePullSecrets) == 2 && pod.Spec.ImagePullSecrets[0].Name == "shared" && pod.Spec.ImagePullSecrets[1].Name == "regcred",
		d.Spec.Strategy.RollingUpdate != nil && d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() == 0 &&
			d.Spec.Strategy.RollingUpdate.MaxSurge.String() == "25%",
		slices.ContainsFunc(pod.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "HTTPS_PROXY" && e.Value == "http://proxy:3128" }),
		len(pod.Spec.Volumes) == 2 && pod.Spec.Volumes[1].EmptyDir != nil && len(pod.Spec.Containers[0].VolumeMounts) == 2 &&
			pod.Spec.Containers[0].VolumeMounts[1].MountPath == "/tmp/scratch",
		len(pod.Spec.TopologySpreadConstraints) == 1 && pod.Spec.TopologySpreadConstraints[0].TopologyKey == "topology.kubernetes.io/zone",
		pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsUser != nil && *pod.Spec.SecurityContext.RunAsUser == 65532,
		pod.Spec.ServiceAccountName == "retryguard",
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
	var sa corev1.ServiceAccount
	if err := c.Get(ctx, clientKey(namespace, "retryguard"), &sa); err != nil || sa.Annotations["example.com/role"] != "operator" {
		t.Errorf("ServiceAccount retryguard %v: annotations %v", err, sa.Annotations)
	}
	for _, name := range []string{"retryguard-webhook", "retryguard-metrics"} {
		if err := c.Get(ctx, clientKey(namespace, name), &corev1.Service{}); err != nil {
			t.Errorf("Service %s: %v", name, err)
		}
	}

	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace, upgrade.ResetThenReuseValues = namespace, true
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
	if err := c.Get(ctx, clientKey("", "retrypolicies.policy.retryguard.io"), crdMeta()); err != nil {
		t.Errorf("the adopted CRD after uninstall (crds.keep): %v", err)
	}
}

// crdMeta is a CRD's metadata alone, which a client of any scheme reads and patches.
func crdMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	return m
}

// serviceAccount: the chart's RBAC and admission policy name the account the
// manager runs as, whether the chart creates it or it exists beforehand.
func TestChartServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		sets   []string
		name   string
		create bool
	}{
		{nil, "rg-retryguard", true},
		{[]string{"serviceAccount.name=guard"}, "guard", true},
		{[]string{"serviceAccount.create=false", "serviceAccount.name=platform-operator"}, "platform-operator", false},
		{[]string{"serviceAccount.create=false"}, "default", false},
	} {
		byKind := mustTemplate(t, tc.sets...)
		if podSpec(byKind)["serviceAccountName"] != tc.name {
			t.Errorf("%v: the pods run as %v, want %s", tc.sets, podSpec(byKind)["serviceAccountName"], tc.name)
		}
		sa := byName(byKind["ServiceAccount"], tc.name)
		if (sa != nil) != tc.create {
			t.Errorf("%v: ServiceAccount %s rendered: %v, want %v", tc.sets, tc.name, sa != nil, tc.create)
		}
		if sa != nil && sa["automountServiceAccountToken"] != true {
			t.Errorf("%v: %v", tc.sets, sa)
		}
		for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
			for _, b := range byKind[kind] {
				for _, s := range b["subjects"].([]any) {
					if s := s.(object); s["kind"] == "ServiceAccount" && s["name"] != tc.name && !strings.HasSuffix(fmt.Sprint(s["name"]), "-metrics-scraper") {
						t.Errorf("%v: %s %v binds %v, want %s", tc.sets, kind, b["metadata"].(object)["name"], s, tc.name)
					}
				}
			}
		}
		if vap := fmt.Sprint(byKind["ValidatingAdmissionPolicy"]); !strings.Contains(vap, "system:serviceaccount:"+namespace+":"+tc.name) {
			t.Errorf("%v: the admission policy does not name the operator %s", tc.sets, tc.name)
		}
	}
	sa := byName(mustTemplate(t, "serviceAccount.annotations.example\\.com/role=operator", "serviceAccount.labels.team=platform",
		"serviceAccount.automountServiceAccountToken=false")["ServiceAccount"], "rg-retryguard")
	if meta := sa["metadata"].(object); meta["annotations"].(object)["example.com/role"] != "operator" || meta["labels"].(object)["team"] != "platform" ||
		meta["labels"].(object)["app.kubernetes.io/instance"] != release || sa["automountServiceAccountToken"] != false {
		t.Errorf("ServiceAccount %v", sa)
	}
}
