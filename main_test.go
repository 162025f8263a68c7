package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/hack/devenv"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The manager binary's own wiring: flags, controllers publishing, probes,
// the metrics endpoint with Retryguard's gauge, and a clean stop.
func TestManagerRuns(t *testing.T) {
	env, err := devenv.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kubeconfig", kubeconfig, "--leader-elect=false", "--enable-webhooks=false",
			"--metrics-bind-address", metrics, "--health-probe-bind-address", probes, "--max-leaf-attempts=9"})
	}()

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, fixtures.Budget("default", fixtures.DefaultBudget, 10)); err != nil {
		t.Fatal(err)
	}
	// Leaf 9 is Ready only because --max-leaf-attempts=9 reached the controllers.
	if err := c.Create(ctx, fixtures.Policy("default", "job", "job", 3)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, fixtures.Policy("default", "connector", "connector", 3, fixtures.Parent("job"))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		var cm corev1.ConfigMap
		if c.Get(ctx, client.ObjectKey{Namespace: "default", Name: policyconfig.ConfigMapName("connector")}, &cm) != nil {
			return false
		}
		p, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
		return err == nil && p.Enforcement.Mode == policyconfig.Enforced && p.Policy.LeafAttempts == 9
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		waitUntil(t, func() bool { return get(probes+path) != "" })
	}
	waitUntil(t, func() bool {
		return strings.Contains(get(metrics+"/metrics"), `retryguard_retrypolicies{ready="True",reason="Published"}`)
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the manager stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop")
	}
}

func TestManagerRejectsBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"--max-retry-percent=250"}); err == nil || !strings.Contains(err.Error(), "1 to 100") {
		t.Fatalf("%v", err)
	}
}

// get returns the body of a 200 answer, or "".
func get(addr string) string {
	res, err := http.Get("http://" + addr)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("not reached in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
