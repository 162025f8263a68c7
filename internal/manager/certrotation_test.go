package manager_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/internal/manager"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/internal/testenv"
)

// Without cert-manager the manager issues its own serving certificate and
// injects its CA: an admission request reaches the webhook over TLS that the
// API server verifies with the injected CA, readiness waits for the
// certificate, and a rotated certificate is served without a restart; all
// with the RBAC of config/without-cert-manager.
func TestManagerRotatesItsOwnCertificate(t *testing.T) {
	cfg, kubeconfig := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// What the chart installs with webhook.certManager.enabled=false: an
	// empty Secret and a webhook configuration without a caBundle. Here the
	// API server reaches the webhook by URL instead of through a Service.
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
	// The manager runs as its ServiceAccount with config/rbac's rules and
	// config/components/cert-rotation's.
	saKubeconfig := asServiceAccount(ctx, t, c, kubeconfig, ns, testenv.Path("config", "components", "cert-rotation", "rbac.yaml"))
	certDir := t.TempDir()
	go mountSecret(ctx, c, client.ObjectKeyFromObject(secret), certDir)

	probes := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(ctx, []string{"--kubeconfig", saKubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
			"--health-probe-bind-address", probes, "--webhook-port", port, "--webhook-cert-dir", certDir,
			"--cert-rotation", "--namespace", ns, "--webhook-cert-dns-names=localhost"}, manager.Build{})
	}()
	waitFor(t, 90*time.Second, func() bool { code, _ := get("http://"+probes+"/readyz", ""); return code == http.StatusOK })

	// Ready means the CA is injected and the certificate is served.
	caBundle := injectedCA(ctx, t, c)
	if len(caBundle) == 0 {
		t.Fatal("ready, but no caBundle in the webhook configuration")
	}
	first := servedCertificate(t, webhookAddr, caBundle)
	if proto := negotiatedProtocol(t, webhookAddr); proto == "h2" {
		t.Fatal("the webhook server offers HTTP/2 without --enable-http2")
	}
	expectRefusedByWebhook(ctx, t, c, "a")

	// Rotate: a Secret whose CA no longer verifies makes the rotator issue
	// a new CA and certificate, and inject the new CA.
	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"ca.crt": []byte("garbage"), "ca.key": []byte("garbage")}
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var rotatedCA []byte
	waitFor(t, 60*time.Second, func() bool {
		rotatedCA = injectedCA(ctx, t, c)
		return len(rotatedCA) > 0 && !bytes.Equal(rotatedCA, caBundle)
	})
	// The running server picks the new files up: it now presents a
	// certificate that the new CA verifies.
	waitFor(t, 60*time.Second, func() bool {
		second, ok := tryServedCertificate(webhookAddr, rotatedCA)
		return ok && second != first
	})
	expectRefusedByWebhook(ctx, t, c, "b")

	select {
	case err := <-done:
		t.Fatalf("the manager stopped: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the manager stopped with %v", err)
	}
}

// expectRefusedByWebhook creates a chain whose leaf attempts exceed the
// platform limit, a rule only the webhook enforces: the refusal carries the
// webhook's code, which proves that the API server reached it and trusted
// its certificate.
func expectRefusedByWebhook(ctx context.Context, t *testing.T, c client.Client, suffix string) {
	t.Helper()
	parent := fixtures.Policy("default", "job-"+suffix, "job", 3)
	if err := c.Create(ctx, parent); err != nil {
		t.Fatalf("the webhook refused a valid policy: %v", err)
	}
	// The webhook judges the chain from its informer cache, which sees the
	// parent a moment after the API server stored it: until then the child
	// is admitted (its parent unknown, the controller holds it NoRetry).
	// Such an admission is undone and tried again; what must come, and
	// within the deadline, is the webhook's refusal.
	deadline := time.Now().Add(30 * time.Second)
	for {
		child := fixtures.Policy("default", "connector-"+suffix, "connector", 3, fixtures.Parent(parent.Name))
		err := c.Create(ctx, child)
		if err != nil && strings.Contains(err.Error(), string(codes.LayerAmplification)) {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("want a refusal with %s from the webhook, got %v", codes.LayerAmplification, err)
		}
		if err := c.Delete(ctx, child); err != nil {
			t.Fatalf("deleting a child admitted before the webhook's cache saw its parent: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// webhookConfigurationByURL is config/webhook's configuration, as
// `make manifests` generates it, pointed at url.
func webhookConfigurationByURL(t *testing.T, url string) *admissionv1.ValidatingWebhookConfiguration {
	var vwc admissionv1.ValidatingWebhookConfiguration
	raw, err := os.ReadFile(testenv.Path("config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	loadYAMLBytes(t, bytes.TrimPrefix(raw, []byte("---\n")), &vwc)
	vwc.Name = options.DefaultWebhookConfiguration
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		u := url + *cc.Service.Path
		cc.Service, cc.URL = nil, &u
	}
	return &vwc
}

func injectedCA(ctx context.Context, t *testing.T, c client.Client) []byte {
	var vwc admissionv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: options.DefaultWebhookConfiguration}, &vwc); err != nil {
		t.Fatal(err)
	}
	ca := vwc.Webhooks[0].ClientConfig.CABundle
	for _, w := range vwc.Webhooks[1:] {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			return nil // injection in progress
		}
	}
	return ca
}

func servedCertificate(t *testing.T, addr string, ca []byte) string {
	t.Helper()
	fp, ok := tryServedCertificate(addr, ca)
	if !ok {
		t.Fatalf("%s does not serve a certificate that the injected CA verifies for localhost", addr)
	}
	return fp
}

// tryServedCertificate returns the fingerprint of the certificate addr
// serves, when ca verifies it for the name localhost.
func tryServedCertificate(addr string, ca []byte) (string, bool) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return "", false
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", false
	}
	defer conn.Close()
	return fmt.Sprintf("%x", sha256.Sum256(conn.ConnectionState().PeerCertificates[0].Raw)), true
}

// mountSecret does the kubelet's part: it keeps dir in step with the
// Secret's tls.crt and tls.key, replacing each file atomically.
func mountSecret(ctx context.Context, c client.Client, key client.ObjectKey, dir string) {
	var last string
	for ctx.Err() == nil {
		var s corev1.Secret
		if c.Get(ctx, key, &s) == nil && len(s.Data["tls.crt"]) > 0 && s.ResourceVersion != last {
			for _, name := range []string{"tls.key", "tls.crt"} {
				tmp := filepath.Join(dir, "."+name)
				if os.WriteFile(tmp, s.Data[name], 0o600) == nil {
					_ = os.Rename(tmp, filepath.Join(dir, name))
				}
			}
			last = s.ResourceVersion
		}
		time.Sleep(100 * time.Millisecond)
	}
}
