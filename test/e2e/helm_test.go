package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/postrender"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/release"

	"github.com/retryguard/retryguard/hack/publish"
)

// The release the suite installs, as the README's install instructions do,
// from the node's registry, where the suite published and verified the chart:
// helm install retryguard oci://<registry>/charts/retryguard --version <version>
// -n retryguard-system --create-namespace.
const (
	releaseName      = "retryguard"
	releaseNamespace = "retryguard-system"
	helmTimeout      = 4 * time.Minute
)

// helmConfig is Helm's action configuration for the suite's cluster.
func helmConfig() (*action.Configuration, error) {
	kubeconfig, ns := node.Kubeconfig, releaseNamespace
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	return cfg, cfg.Init(flags, releaseNamespace, "secret", func(format string, v ...any) { logf("helm: "+format, v...) })
}

// locateChart pulls the published chart as `helm install oci://… --version`
// and `helm upgrade` do (Helm's ChartPathOptions.LocateChart, over Helm's
// registry client trusting the registry's CA) and loads it.
func locateChart(co *action.ChartPathOptions) (*chart.Chart, error) {
	settings := cli.New()
	cache, err := os.MkdirTemp("", "retryguard-e2e-helm-cache-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cache)
	settings.RepositoryCache = cache
	co.Version = chartVersion
	path, err := co.LocateChart("oci://"+published.Chart.Repository(), settings)
	if err != nil {
		return nil, err
	}
	return loader.Load(path)
}

// chartClient is Helm's registry client for the node's registry.
func chartClient() (*registry.Client, error) {
	transport, err := publish.Transport(node.RegistryCA)
	if err != nil {
		return nil, err
	}
	return publish.ChartClient(transport)
}

// selfManagedCerts reports whether the chart can run without cert-manager
// (webhook.certManager.enabled=false, the manager issuing its own serving
// certificate).
func selfManagedCerts(ch *chart.Chart) bool {
	webhook, _ := ch.Values["webhook"].(map[string]any)
	_, ok := webhook["certManager"]
	return ok
}

// chartValues are the values the suite installs with, plus extra: the
// images the suite verified, from the node's registry, pinned by digest.
func chartValues(ch *chart.Chart, extra map[string]any) map[string]any {
	pinned := func(a publish.Artifact) map[string]any {
		return map[string]any{"repository": a.Repository(), "digest": a.Digest, "pullPolicy": "IfNotPresent"}
	}
	vals := map[string]any{"image": pinned(managerImage)}
	if _, ok := ch.Values["proxy"]; ok {
		vals["proxy"] = map[string]any{"image": pinned(proxyImage)}
	}
	if selfManagedCerts(ch) {
		vals["webhook"] = map[string]any{"certManager": map[string]any{"enabled": false}}
	}
	for k, v := range extra {
		vals[k] = v
	}
	return vals
}

// postRenderer is nil when the chart manages its own certificates. For a
// chart that still requires cert-manager, it stands in for cert-manager,
// which this cluster does not run: it issues each Certificate's Secret from
// a throwaway CA, drops the Issuer and Certificate, and injects the CA into
// the webhook configuration as cert-manager's CA injector would.
func postRenderer(ctx context.Context, ch *chart.Chart) postrender.PostRenderer {
	if selfManagedCerts(ch) {
		return nil
	}
	if standIn == nil {
		logf("the chart has no webhook.certManager option: the suite stands in for cert-manager")
		standIn = &certManagerStandIn{ctx: ctx}
	}
	return standIn
}

// standIn is shared by install and upgrade, so that an upgrade keeps the
// serving certificate the running pods have.
var standIn *certManagerStandIn

type certManagerStandIn struct {
	ctx        context.Context
	ca         []byte
	secretName string
}

func (s *certManagerStandIn) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	var docs []*unstructured.Unstructured
	for _, doc := range strings.Split(in.String(), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			docs = append(docs, u)
		}
	}
	out := &bytes.Buffer{}
	var kept []*unstructured.Unstructured
	for _, u := range docs {
		switch u.GetKind() {
		case "Issuer":
			continue
		case "Certificate":
			if s.ca == nil {
				if err := s.issue(u); err != nil {
					return nil, err
				}
			}
			continue
		}
		kept = append(kept, u)
	}
	for _, u := range kept {
		if u.GetKind() == "ValidatingWebhookConfiguration" && s.ca != nil {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				_ = unstructured.SetNestedField(h.(map[string]any), string(pemToBase64(s.ca)), "clientConfig", "caBundle")
			}
			_ = unstructured.SetNestedSlice(u.Object, hooks, "webhooks")
			ann := u.GetAnnotations()
			delete(ann, "cert-manager.io/inject-ca-from")
			u.SetAnnotations(ann)
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out, nil
}

// issue creates the Secret a cert-manager Certificate asks for.
func (s *certManagerStandIn) issue(cert *unstructured.Unstructured) error {
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "retryguard-e2e-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return err
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	s.secretName = secretName
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(s.ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: releaseNamespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"ca.crt":  s.ca,
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
	}
	_ = cs.CoreV1().Secrets(releaseNamespace).Delete(s.ctx, secretName, metav1.DeleteOptions{})
	_, err = cs.CoreV1().Secrets(releaseNamespace).Create(s.ctx, secret, metav1.CreateOptions{})
	return err
}

func pemToBase64(p []byte) []byte {
	// caBundle is []byte in the API, so JSON/YAML carries it base64-encoded.
	return []byte(b64(p))
}

func helmInstall(ctx context.Context) (*release.Release, error) {
	cfg, err := helmConfig()
	if err != nil {
		return nil, err
	}
	client, err := chartClient()
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.SetRegistryClient(client)
	ch, err := locateChart(&in.ChartPathOptions)
	if err != nil {
		return nil, err
	}
	in.ReleaseName, in.Namespace, in.CreateNamespace = releaseName, releaseNamespace, true
	in.Wait, in.Timeout = true, helmTimeout
	in.PostRenderer = postRenderer(ctx, ch)
	return in.RunWithContext(ctx, ch, chartValues(ch, nil))
}

func helmUpgrade(ctx context.Context, extra map[string]any) (*release.Release, error) {
	return helmUpgradeChart(ctx, extra, nil)
}

// helmUpgradeChart upgrades to the published chart, changed by edit first
// when edit is not nil.
func helmUpgradeChart(ctx context.Context, extra map[string]any, edit func(*chart.Chart) error) (*release.Release, error) {
	cfg, err := helmConfig()
	if err != nil {
		return nil, err
	}
	client, err := chartClient()
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.SetRegistryClient(client)
	ch, err := locateChart(&up.ChartPathOptions)
	if err != nil {
		return nil, err
	}
	if edit != nil {
		if err := edit(ch); err != nil {
			return nil, err
		}
	}
	up.Namespace, up.Wait, up.Timeout = releaseNamespace, true, helmTimeout
	up.PostRenderer = postRenderer(ctx, ch)
	return up.RunWithContext(ctx, releaseName, ch, chartValues(ch, extra))
}

func helmUninstall() error {
	cfg, err := helmConfig()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, helmTimeout
	res, err := un.Run(releaseName)
	if err == nil && res != nil && res.Info != "" {
		logf("helm uninstall: %s", res.Info)
	}
	return err
}

// upgradeColumn is the printer column addPolicyPrinterColumn adds.
const upgradeColumn = "Generation"

// addPolicyPrinterColumn adds a printer column to the chart's RetryPolicy
// CRD template, the change a release that changes a CRD makes.
func addPolicyPrinterColumn(ch *chart.Chart) error {
	const marker = "  - additionalPrinterColumns:\n"
	column := "    - jsonPath: .metadata.generation\n      name: " + upgradeColumn + "\n      type: integer\n"
	for _, f := range ch.Templates {
		if f.Name != "templates/crd-policy.retryguard.io_retrypolicies.yaml" {
			continue
		}
		text := string(f.Data)
		i := strings.Index(text, marker)
		if i < 0 {
			return fmt.Errorf("%s has no printer columns to add one to", f.Name)
		}
		i += len(marker)
		f.Data = []byte(text[:i] + column + text[i:])
		return nil
	}
	return fmt.Errorf("the chart %s has no RetryPolicy CRD template", ch.Metadata.Version)
}
