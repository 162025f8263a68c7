package manager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The metrics endpoint serves the webhook's certificate, so that a scraper
// verifies it against the CA from the same Secret (no insecureSkipVerify):
// nothing before the files exist, then the certificate, then its renewal
// without a restart; and the expiry gauge follows the notAfter served.
func TestMetricsServeTheWebhookCertificateAndItsExpiry(t *testing.T) {
	dir := t.TempDir()
	s := &servingCert{dir: dir}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: s.getCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	const name = "rg-retryguard-metrics.retryguard-system.svc"
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "retryguard-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	issue := func(serial int64, notAfter time.Time, mod time.Time) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		for file, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
			path := filepath.Join(dir, file)
			if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, mod, mod); err != nil {
				t.Fatal(err)
			}
		}
	}
	served := func() (*x509.Certificate, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(), &tls.Config{RootCAs: roots, ServerName: name})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)

	if _, err := served(); err == nil {
		t.Fatal("a handshake succeeded before the certificate existed")
	}
	if n := testutil.CollectAndCount(s); n != 0 {
		t.Fatalf("%d expiry samples without a certificate", n)
	}
	first := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	issue(2, first, time.Now().Add(-time.Minute))
	if c, err := served(); err != nil || c.SerialNumber.Int64() != 2 {
		t.Fatalf("served %v, %v; want serial 2, verified by the CA", c, err)
	}
	if got := testutil.ToFloat64(s); got != float64(first.Unix()) {
		t.Errorf("expiry %v, want %d", got, first.Unix())
	}
	renewed := first.Add(24 * time.Hour)
	issue(3, renewed, time.Now())
	if c, err := served(); err != nil || c.SerialNumber.Int64() != 3 {
		t.Fatalf("after renewal served %v, %v; want serial 3", c, err)
	}
	if got := testutil.ToFloat64(s); got != float64(renewed.Unix()) {
		t.Errorf("expiry after renewal %v, want %d", got, renewed.Unix())
	}
}
