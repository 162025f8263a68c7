package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/webhooks"
)

// privateCA is a CA of the suite's own and a serving certificate it signed
// for ip, PEM-encoded: what a team's private CA gives its dependency.
type privateCA struct{ caPEM, certPEM, keyPEM []byte }

func newPrivateCA(ip string) privateCA {
	GinkgoHelper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "payments private CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "vendor-tls"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP(ip)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	return privateCA{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// vendorTLS runs a second vendor that serves https on 8443 with a
// certificate from a private CA, and returns its Service and the CA.
func vendorTLS(ctx context.Context) (*corev1.Service, privateCA) {
	GinkgoHelper()
	labels := map[string]string{"app": "vendor-tls"}
	svc := service("vendor-tls", labels)
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 8443, TargetPort: intstr.FromInt32(8443)})
	svc.Spec.Ports[0].Name = "http"
	Expect(k8s.Create(ctx, svc)).To(Succeed())
	ca := newPrivateCA(svc.Spec.ClusterIP)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vendor-tls", Namespace: appNamespace},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": ca.certPEM, "tls.key": ca.keyPEM}}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	dep, _ := vendor()
	dep.Name = "vendor-tls"
	dep.Spec.Selector.MatchLabels = labels
	dep.Spec.Template.Labels = labels
	pod := &dep.Spec.Template.Spec
	pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}}
	pod.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret.Name, DefaultMode: ptr.To[int32](0o444)}}}}
	Expect(k8s.Create(ctx, dep)).To(Succeed())
	readyPod(ctx, "vendor-tls")
	Eventually(func() error { return call(ctx, "GET", svcURL(svc)+"/healthz", nil, nil) }).
		WithContext(ctx).WithPolling(200 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())
	return svc, ca
}

// GetResult mirrors testdata/wget-get.cgi's answer.
type GetResult struct {
	Exit int `json:"exit"`
}

// startWgetApp creates a wgetapp whose route /v1/ goes to upstream, waits
// for it, and returns its Service.
func startWgetApp(ctx context.Context, name, upstream string, annotations map[string]string) *corev1.Service {
	GinkgoHelper()
	cm, dep, svc := wgetapp(name, "sms-2fa-dispatch", upstream, nil)
	for k, v := range annotations {
		dep.Spec.Template.Annotations[k] = v
	}
	for _, o := range []client.Object{cm, svc, dep} {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	injectedSidecar(readyPod(ctx, name))
	Eventually(func() error { return call(ctx, "GET", svcURL(svc)+"/healthz", nil, nil) }).
		WithContext(ctx).WithPolling(200 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())
	return svc
}

// sidecarEdgesSpec (issue 28) drives the real injected sidecar from busybox
// wget where the dependency fails in ways the happy path never shows: a TLS
// handshake that fails is a 5xx naming it, never 202 ("maybe applied"), and
// the dependency receives nothing; a body the dependency cuts part way is a
// broken body for wget, as it is calling the dependency directly.
func sidecarEdgesSpec(ctx context.Context, vendorSvc *corev1.Service) {
	tlsSvc, ca := vendorTLS(ctx)
	httpsURL := fmt.Sprintf("https://%s:8443", tlsSvc.Spec.ClusterIP)

	// A dependency whose CA the pod does not trust.
	untrusted := startWgetApp(ctx, "wgetapp-untrusted", httpsURL, nil)
	Expect(call(ctx, "PUT", svcURL(tlsSvc)+"/script", []int{}, nil)).To(Succeed())
	var r SendResult
	Expect(call(ctx, "POST", sendURL(svcURL(untrusted), wgetApp)+"?user=tls&session=s-9", nil, &r)).To(Succeed())
	Expect(r.Status).To(Equal(502), "an untrusted certificate through the sidecar: %+v", r)
	var seen []Attempt
	Expect(call(ctx, "GET", svcURL(tlsSvc)+"/attempts", nil, &seen)).To(Succeed())
	Expect(seen).To(BeEmpty(), "the handshake failed, so the dependency received nothing")

	// Issue 29: a team names its private CA in a ConfigMap (as
	// trust-manager writes one); the injected sidecar trusts it.
	Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vendor-ca", Namespace: appNamespace},
		Data: map[string]string{"ca.crt": string(ca.caPEM)}})).To(Succeed())
	trusted := startWgetApp(ctx, "wgetapp-trusted", httpsURL, map[string]string{webhooks.CAConfigMapAnnotation: "vendor-ca"})
	Expect(call(ctx, "POST", sendURL(svcURL(trusted), wgetApp)+"?user=tls&session=s-9", nil, &r)).To(Succeed())
	Expect(r.Status).To(Equal(201), "the private CA named by the pod: %+v", r)
	Expect(call(ctx, "GET", svcURL(tlsSvc)+"/attempts", nil, &seen)).To(Succeed())
	Expect(seen).To(HaveLen(1), "one request over TLS to the dependency: %+v", seen)

	// The untrusted pod's letter is its own: the pod reads it on its
	// loopback; another namespace's pod cannot even connect to the port.
	pod := readyPod(ctx, "wgetapp-untrusted")
	expectLetter(ctx, pod, "SMS-2FA-tls-s-9", "ERR_PERMANENT_FAILURE", 1)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b"}})).To(Succeed())
	probe := deployNetprobe(ctx, "tenant-b")
	d := dialFrom(ctx, probe, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(proxy.DefaultAdminPort)))
	Expect(d.Connected).To(BeFalse(), "another namespace's pod reached the sidecar's letters")

	// A cut body: the dependency itself, read directly, breaks; through the
	// sidecar, wget sees the same.
	res, err := httpClient.Get(svcURL(vendorSvc) + "/v1/cut")
	Expect(err).NotTo(HaveOccurred())
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	Expect(err).To(HaveOccurred(), "the vendor's /v1/cut must break its body")
	cut := startWgetApp(ctx, "wgetapp-cut", svcURL(vendorSvc), nil)
	var whole, broken GetResult
	Expect(call(ctx, "GET", svcURL(cut)+"/cgi-bin/get?path=/v1/whole", nil, &whole)).To(Succeed())
	Expect(whole.Exit).To(Equal(0), "wget reads a whole body through the sidecar")
	Expect(call(ctx, "GET", svcURL(cut)+"/cgi-bin/get?path=/v1/cut", nil, &broken)).To(Succeed())
	Expect(broken.Exit).NotTo(Equal(0), "busybox wget read the cut body as complete")
}
