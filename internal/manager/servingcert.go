package manager

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// servingCert serves the webhook's certificate (cert-manager's, or the
// rotation's) on another listener, the metrics endpoint, so that a scraper
// can verify it with the CA in the same Secret (the chart's ServiceMonitor
// does; docs/metrics.md). It reads tls.crt and tls.key at a handshake when
// their modification time changed, so a certificate that appears after the
// start (the rotation writes it then) or is renewed is served without a
// restart. As a Prometheus collector it gives the certificate's notAfter.
// It is safe for concurrent use.
type servingCert struct {
	dir string

	mu   sync.Mutex
	mod  [2]time.Time
	cert *tls.Certificate
}

var certExpiry = prometheus.NewDesc("retryguard_webhook_certificate_expiry_timestamp_seconds",
	"When the webhook serving certificate the manager mounts expires (its notAfter), in Unix seconds.", nil, nil)

// load returns the certificate in dir, read again when its files changed.
func (s *servingCert) load() (*tls.Certificate, error) {
	certFile, keyFile := filepath.Join(s.dir, "tls.crt"), filepath.Join(s.dir, "tls.key")
	var mod [2]time.Time
	for i, f := range []string{certFile, keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		mod[i] = fi.ModTime()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && mod == s.mod {
		return s.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	s.cert, s.mod = &cert, mod
	return s.cert, nil
}

// getCertificate is tls.Config.GetCertificate.
func (s *servingCert) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := s.load()
	if err != nil {
		return nil, errors.Join(errors.New("the serving certificate is not readable yet"), err)
	}
	return cert, nil
}

// Describe implements prometheus.Collector.
func (s *servingCert) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiry }

// Collect implements prometheus.Collector: no sample while there is no
// readable certificate (the rotation has not written one yet).
func (s *servingCert) Collect(ch chan<- prometheus.Metric) {
	if cert, err := s.load(); err == nil {
		ch <- prometheus.MustNewConstMetric(certExpiry, prometheus.GaugeValue, float64(cert.Leaf.NotAfter.Unix()))
	}
}
