package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// privateCA is a team's own CA, as trust-manager distributes it: its PEM in
// a file, and a TLS upstream on loopback whose certificate it signed.
func privateCA(t *testing.T, handler http.Handler) (caFile string, upstream *httptest.Server) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, leafKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "team private CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "upstream"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	upstream = httptest.NewUnstartedServer(handler)
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	upstream.StartTLS()
	t.Cleanup(upstream.Close)
	caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile, upstream
}

// Issue 29: "It cannot reach any https dependency ... no CA bundle can be
// added to an injected pod." With --ca-file naming the team's CA, the
// sidecar reaches an https upstream that CA signed, through the policy's
// pool; without it the handshake fails and the upstream sees nothing.
func TestAnHTTPSUpstreamSignedByAPrivateCA(t *testing.T) {
	var reached atomic.Int32
	caFile, upstream := privateCA(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(sc sidecar) int {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/messages", sc.port), strings.NewReader("{}"))
		req.Header.Set("Retryguard-Var-User-Id", "42")
		req.Header.Set("Retryguard-Var-Login-Session-Id", "s-9")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	if got := send(startSidecar(t, upstream.URL)); got == http.StatusCreated || reached.Load() != 0 {
		t.Fatalf("without --ca-file: %d, the upstream reached %d times; want a failed handshake", got, reached.Load())
	}
	if got := send(startSidecar(t, upstream.URL, func(o *options) { o.caFile = caFile })); got != http.StatusCreated || reached.Load() != 1 {
		t.Fatalf("with --ca-file: %d, the upstream reached %d times; want its 201", got, reached.Load())
	}
	// The transport of a policy without a pool trusts the same roots.
	base, _, err := trust(caFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Transport: base}).Get(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
}

// A --ca-file that holds no certificate stops the sidecar at start, naming
// the flag: never a sidecar that quietly trusts less than it was told.
func TestACAFileWithoutCertificatesStopsTheSidecar(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(t.TempDir(), "missing.crt")} {
		if _, _, err := trust(file); err == nil || !strings.Contains(err.Error(), "--ca-file") {
			t.Errorf("trust(%s): %v, want an error naming --ca-file", file, err)
		}
	}
}

// The image is one static binary on scratch, without a CA bundle: the
// binary carries the Mozilla roots, which the system pool falls back to
// when the OS has none (here: SSL_CERT_FILE and SSL_CERT_DIR name nothing).
func TestTheBinaryCarriesTheMozillaRoots(t *testing.T) {
	if os.Getenv("RETRYGUARD_ROOTS_CHILD") == "1" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("roots", len(roots.Subjects())) //nolint:staticcheck // Subjects counts the pool, which is all this needs
		return
	}
	empty := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTheBinaryCarriesTheMozillaRoots$")
	cmd.Env = append(os.Environ(), "RETRYGUARD_ROOTS_CHILD=1", "SSL_CERT_FILE="+filepath.Join(empty, "none.pem"), "SSL_CERT_DIR="+empty)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	n := -1
	if _, after, ok := strings.Cut(string(out), "roots "); ok {
		_, _ = fmt.Sscanf(after, "%d", &n)
	}
	if n < 100 {
		t.Fatalf("a process without an OS bundle has %d roots: %s", n, out)
	}
}
