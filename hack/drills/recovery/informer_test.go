package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

// With --kubeconfig, the drill reads the policy the controller published in
// a cluster, through the informer watcher.
func TestKubeconfigReadsThePublishedConfigMap(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs KUBEBUILDER_ASSETS (hack/envtest-assets.sh), as make drill-check sets it")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	want, err := samplePayload(samples, samplePolicy, "default")
	if err != nil {
		t.Fatal(err)
	}
	data, err := policyconfig.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	controller := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: policyconfig.ConfigMapName(samplePolicy), Namespace: "default",
			Labels: map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: samplePolicy},
			// Pods serve only what the operator published: its label, and a
			// controller owner reference to the RetryPolicy.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: policyconfig.OwnerAPIVersion, Kind: policyconfig.OwnerKind,
				Name: samplePolicy, UID: "00000000-0000-0000-0000-000000002901", Controller: &controller}}},
		Data: map[string]string{policyconfig.DataKey: string(data)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := startWatcher(ctx, policySource{Kind: "informer", Where: kubeconfig, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Policy(samplePolicy); !reflect.DeepEqual(got, want) {
		t.Fatalf("the informer serves %+v, want %+v", got, want)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := startWatcher(short, policySource{Kind: "informer", Where: kubeconfig, Namespace: "elsewhere"}); err == nil {
		t.Fatal("a namespace without the policy: no error")
	}
}
