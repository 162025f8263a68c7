package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/webhooks"
)

// REVIEW PROBE (not product code). drainThenStop's goroutine ends on every
// path: run returning before any signal, and run returning during the
// drain (mgr.Start failed, or a test cancelled); the drain never starts
// without a signal.
func TestReviewProbeDrainThenStopLeaksNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	for range 50 {
		var d webhooks.Draining
		_, cancel := drainThenStop(context.Background(), &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		cancel() // run returned early (an error before the manager started)
		if d.On() {
			t.Fatal("drained without a signal")
		}
		sig, term := context.WithCancel(context.Background())
		stop, cancel := drainThenStop(sig, &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		term()
		waitUntil(t, d.On)
		cancel() // run returned during the drain
		<-stop.Done()
	}
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= base+2 })
}

// REVIEW PROBE (not product code). The real binary's wiring (run), with
// its webhooks and certificate rotation against a real API server: after
// the signal, /readyz fails at once, the webhook still answers for the
// drain and every answer closes its connection (before it, none does), the
// API server's own reviews still succeed, and run returns soon after the
// drain. The time from the drain's end to run's return is logged: it must
// fit the 5 s left of terminationGracePeriodSeconds (10) after a 5 s drain.
func TestReviewProbeTheRealManagerDrains(t *testing.T) {
	cfg, kubeconfig := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "retryguard-system"
	webhookAddr := freeAddr(t)
	_, port, _ := strings.Cut(webhookAddr, ":")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: options.DefaultCertSecret}}
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, secret,
		webhookConfigurationByURL(t, "https://localhost:"+port)} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	saKubeconfig := asServiceAccount(ctx, t, c, kubeconfig, ns, testenv.Path("config", "components", "cert-rotation", "rbac.yaml"))
	certDir := t.TempDir()
	go mountSecret(ctx, c, client.ObjectKeyFromObject(secret), certDir)

	const drain = 4 * time.Second
	probes := freeAddr(t)
	signal, terminate := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(signal, []string{"--kubeconfig", saKubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
			"--health-probe-bind-address", probes, "--webhook-port", port, "--webhook-cert-dir", certDir,
			"--cert-rotation", "--namespace", ns, "--webhook-cert-dns-names=localhost", "--shutdown-drain=" + drain.String()})
	}()
	waitFor(t, 90*time.Second, func() bool { code, _ := get("http://"+probes+"/readyz", ""); return code == http.StatusOK })
	expectRefusedByWebhook(ctx, t, c, "a")

	// A keep-alive client straight to the webhook port.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a probe
	b := fixtures.Budget("default", "probe", 50)
	b.APIVersion, b.Kind = v1.GroupVersion.String(), "RetryBudget"
	raw, _ := json.Marshal(b)
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: raw},
			Kind: metav1.GroupVersionKind{Group: v1.GroupVersion.Group, Version: v1.GroupVersion.Version, Kind: "RetryBudget"}},
	})
	post := func() (closed bool, err error) {
		res, err := hc.Post("https://"+webhookAddr+"/validate-policy-retryguard-io-v1alpha1-retrybudget", "application/json", bytes.NewReader(review))
		if err != nil {
			return false, err
		}
		defer res.Body.Close()
		var got admissionv1.AdmissionReview
		if err := json.NewDecoder(res.Body).Decode(&got); err != nil || got.Response == nil || got.Response.Allowed {
			t.Fatalf("answer %d: %+v (%v), want a refusal", res.StatusCode, got.Response, err)
		}
		return res.Close, nil
	}
	if closed, err := post(); err != nil || closed {
		t.Fatalf("serving: closed %v, %v; want a kept connection", closed, err)
	}

	terminate() // SIGTERM
	signalled := time.Now()
	waitFor(t, 2*time.Second, func() bool { code, _ := get("http://"+probes+"/readyz", ""); return code != http.StatusOK })
	t.Logf("readyz failed %v after the signal", time.Since(signalled).Round(time.Millisecond))
	for time.Since(signalled) < drain-time.Second {
		closed, err := post()
		if err != nil {
			t.Fatalf("%v into the drain, a review failed: %v", time.Since(signalled).Round(time.Millisecond), err)
		}
		if !closed {
			t.Fatalf("%v into the drain, an answer kept its connection", time.Since(signalled).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	expectRefusedByWebhook(ctx, t, c, "b") // the API server's reviews still answered
	select {
	case err := <-done:
		t.Fatalf("run returned %v into a %v drain: %v", time.Since(signalled), drain, err)
	default:
	}
	select {
	case err := <-done:
		total := time.Since(signalled)
		t.Logf("run returned %v after the signal: %v after the drain ended", total.Round(time.Millisecond), (total - drain).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if total-drain > 5*time.Second {
			t.Errorf("the shutdown after the drain took %v: more than the 5 s a 10 s grace period leaves after a 5 s drain", total-drain)
		}
	case <-time.After(drain + 40*time.Second):
		t.Fatal("run did not return")
	}
}
