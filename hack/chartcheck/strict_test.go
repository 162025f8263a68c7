package chartcheck

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every object the chart renders, in several value sets, is one the API
// server takes with strict field validation (an unknown or duplicated field
// is an error, not a warning), as a server-side dry run: the values that
// pass through as Kubernetes objects (securityContext, volumes, strategy, ...)
// land where Kubernetes reads them. Kinds this API server does not serve
// (cert-manager's, the Prometheus Operator's) are skipped.
func TestChartRendersObjectsTheAPIServerTakesStrictly(t *testing.T) {
	_, c := startBareEnv(t)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, sets := range [][]string{
		nil,
		{"webhook.certManager.enabled=false", "crds.keep=false", "serviceAccount.create=false", "serviceAccount.name=platform-operator",
			"strategy.type=RollingUpdate", "strategy.rollingUpdate.maxSurge=1", "strategy.rollingUpdate.maxUnavailable=0",
			"extraEnv[0].name=HTTPS_PROXY", "extraEnv[0].value=http://proxy:3128",
			"extraEnv[1].name=NODE", "extraEnv[1].valueFrom.fieldRef.fieldPath=spec.nodeName",
			"volumes[0].name=scratch", "volumes[0].emptyDir.medium=Memory", "volumeMounts[0].name=scratch", "volumeMounts[0].mountPath=/scratch",
			"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
			"topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway", "topologySpreadConstraints[0].labelSelector.matchLabels.app=x",
			"securityContext.runAsUser=65532", "securityContext.fsGroup=65532", "containerSecurityContext.runAsGroup=65532",
			"global.imagePullSecrets[0].name=shared", "imagePullSecrets[0].name=regcred", "global.priorityClassName=system-cluster-critical"},
		{"crds.enabled=false", "serviceAccount.annotations.example\\.com/role=operator", "serviceAccount.automountServiceAccountToken=false",
			"metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true", "metrics.dashboard.enabled=true",
			"networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28", "webhook.clientCA.configMapName=ca",
			"strategy.type=Recreate", "podDisruptionBudget.enabled=false", "replicas=1", "leaderElect=false"},
	} {
		served := 0
		for _, objs := range mustTemplate(t, sets...) {
			for _, o := range objs {
				u := toUnstructured(t, o)
				err := c.Create(ctx, u, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
				if meta.IsNoMatchError(err) {
					continue
				}
				if err != nil {
					t.Errorf("%v: %s %s: %v", sets, u.GetKind(), u.GetName(), err)
				}
				served++
			}
		}
		if served < 15 {
			t.Errorf("%v: only %d objects reached the API server", sets, served)
		}
	}
}
