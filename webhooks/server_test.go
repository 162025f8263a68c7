package webhooks_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retryguard/retryguard/webhooks"
)

// pair is a certificate and its key, and the CA that signed it.
type pair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func issue(t *testing.T, template *x509.Certificate, parent *pair) *pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = big.NewInt(time.Now().UnixNano())
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	signer, signerKey := template, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pair{cert: cert, key: key, der: der}
}

func ca(t *testing.T, name string) *pair {
	return issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil)
}

func (p *pair) write(t *testing.T, certFile, keyFile string) {
	t.Helper()
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if keyFile == "" {
		return
	}
	b, err := x509.MarshalECPrivateKey(p.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *pair) tls() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.der}, PrivateKey: p.key}
}

// With ClientCAName the webhook server answers only a caller presenting a
// certificate of that CA (the API server's webhook client certificate): an
// unauthenticated POST, or one with a certificate of another CA, gets no
// answer. Without it (the peer), anyone who reaches the port is answered,
// which is the finding.
func TestWebhookServerWithAClientCAAnswersOnlyItsCertificates(t *testing.T) {
	dir := t.TempDir()
	serving, clients, strangers := ca(t, "serving"), ca(t, "apiserver-webhook-client"), ca(t, "stranger")
	issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "webhook"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, serving).
		write(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	clients.write(t, filepath.Join(dir, "client-ca.crt"), "")
	client := func(ca *pair) *pair {
		return issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca)
	}
	apiserver, stranger := client(clients), client(strangers)

	for _, tc := range []struct {
		clientCAName string
		wantAnswered map[string]bool
	}{
		{"client-ca.crt", map[string]bool{"no certificate": false, "another CA's": false, "the API server's": true}},
		{"", map[string]bool{"no certificate": true, "another CA's": true, "the API server's": true}},
	} {
		t.Run("clientCAName="+tc.clientCAName, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
			srv := webhook.NewServer(webhooks.ServerOptions(port, dir, tc.clientCAName, nil))
			srv.Register("/validate", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Start(ctx) }()
			defer func() { cancel(); <-done }()
			roots := x509.NewCertPool()
			roots.AddCert(serving.cert)
			for name, certs := range map[string][]tls.Certificate{
				"no certificate": nil, "another CA's": {stranger.tls()}, "the API server's": {apiserver.tls()},
			} {
				c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
					TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}}}
				var resp *http.Response
				deadline := time.Now().Add(10 * time.Second)
				for {
					resp, err = c.Post("https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port))+"/validate", "application/json", strings.NewReader(`{}`))
					if err == nil || !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond) // the server is starting
				}
				answered := err == nil && resp.StatusCode == http.StatusOK
				if resp != nil {
					_ = resp.Body.Close()
				}
				if answered != tc.wantAnswered[name] {
					t.Errorf("%s: answered %v, want %v (err %v)", name, answered, tc.wantAnswered[name], err)
				}
			}
		})
	}
}
