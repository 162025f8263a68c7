package retrygrpc_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/retry"
)

// authority is a certificate authority made for one test.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newAuthority(t *testing.T, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &authority{cert: cert, key: key, pool: pool}
}

// issue signs a leaf certificate for the IP addresses and names given.
func (a *authority) issue(t *testing.T, usage x509.ExtKeyUsage, ips []net.IP, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "retryguard test leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, DNSNames: names}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveTLS starts h behind creds (plain text when nil) on loopback.
func serveTLS(t *testing.T, h *health, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// dialTLS opens a channel to addr with opts and TLS credentials of cfg.
func dialTLS(t *testing.T, addr string, cfg *tls.Config, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// Every TLS handshake failure on a channel sent nothing (issue 28, item 1):
// an untrusted authority, a certificate for another name, a plain-text
// server behind TLS credentials, a server that requires a client
// certificate. Under a policy without a key, where anything that may have
// been applied ends UNKNOWN_OUTCOME, none does: the server's handler never
// runs, and no dead letter says an attempt may have been applied. grpc-go
// states the handshake's error only as the text of an UNAVAILABLE
// (picker_wrapper.go: status.Error(codes.Unavailable, err.Error())), so a
// certificate failure cannot be told from a refused connection: it stays a
// ConnectionRefused before dispatch, retried as one.
func TestATLSHandshakeFailureIsNotDispatched(t *testing.T) {
	ca, other := newAuthority(t, "retryguard test CA"), newAuthority(t, "another CA")
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	server := ca.issue(t, x509.ExtKeyUsageServerAuth, loopback)
	for _, tc := range []struct {
		name   string
		server credentials.TransportCredentials
		client *tls.Config
	}{
		{"untrusted authority", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{server}}), &tls.Config{RootCAs: other.pool}},
		{"another name", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.issue(t, x509.ExtKeyUsageServerAuth, nil, "elsewhere.example")}}),
			&tls.Config{RootCAs: ca.pool}},
		{"plain text behind TLS", nil, &tls.Config{RootCAs: ca.pool}},
		{"client certificate required", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{server},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}), &tls.Config{RootCAs: ca.pool}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &health{}
			ic, _, _, _, dead := observed(grpcPolicy(keyless))
			err := check(dialTLS(t, serveTLS(t, h, tc.server), tc.client, ic.DialOptions()...))
			re := retryError(t, err)
			if re.State == retry.UnknownOutcome || re.Last.Dispatched || h.calls() != 0 {
				t.Errorf("%s, last evidence %+v, %d calls at the server; want no UNKNOWN_OUTCOME, nothing dispatched, none: %v",
					re.State, re.Last, h.calls(), err)
			}
			if re.Attempts != 3 || re.Last.Transport != limits.ConnectionRefused || re.Last.Class != retry.Transient {
				t.Errorf("%d attempts, last evidence %+v; want the policy's 3, each a transient ConnectionRefused", re.Attempts, re.Last)
			}
			for _, l := range dead.written() {
				for _, a := range l.Attempts {
					if l.State == retry.UnknownOutcome || a.Evidence.Dispatched {
						t.Errorf("dead letter %s says attempt %d may have been applied: %+v", l.State, a.Attempt, a.Evidence)
					}
				}
			}
		})
	}
	// The same credentials that fail above reach the server when they fit:
	// the failures are the handshake's, not the test's.
	h := &health{}
	ic, _, _ := guarded(grpcPolicy(keyless))
	addr := serveTLS(t, h, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{server}}))
	if err := check(dialTLS(t, addr, &tls.Config{RootCAs: ca.pool}, ic.DialOptions()...)); err != nil || h.calls() != 1 {
		t.Fatalf("trusted TLS: %d calls, %v", h.calls(), err)
	}
}
