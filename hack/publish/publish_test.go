package publish

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/retryguard/retryguard/hack/image/oci"
)

const repoRoot = "../.."

// tool builds (once per machine) and returns one of hack/gotool.sh's tools.
func tool(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "hack", "gotool.sh"), name).Output()
	if err != nil {
		t.Fatalf("hack/gotool.sh %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// startRegistry runs CNCF Distribution on loopback with HTTPS from a CA
// made here, and returns its address and the CA's file. It is stopped, by
// its PID, when the test ends.
func startRegistry(t *testing.T) (addr, caFile string) {
	t.Helper()
	bin := tool(t, "registry")
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeCerts(t, caFile, certFile, keyFile)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %s}
http:
  addr: %s
  tls: {certificate: %s, key: %s}
`, filepath.Join(dir, "data"), addr, certFile, keyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", config)
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Distribution exports traces unless told not to; nothing listens here.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("registry log:\n%s", log)
		}
	})
	transport, err := Transport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: transport, Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, caFile
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry at %s did not answer /v2/: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writeCerts(t *testing.T, caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "publish-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for path, block := range map[string]*pem.Block{
		caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// testArchive packs raw as the image ref, the way `make image` packs the
// manager.
func testArchive(t *testing.T, ref string, raw []byte) (string, v1.Image) {
	t.Helper()
	path := "/" + filepath.Base(strings.Split(ref, ":")[0])
	img, err := oci.Image(oci.Spec{Binary: raw, Path: path, Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), filepath.Base(path)+".tar")
	if err := oci.WriteArchiveFile(archive, img, tag, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return archive, img
}

// The release path end to end against a real registry: what is pushed is
// what was built, each artifact verifies with the release key and with no
// other, each image's SBOM is attested and names the binary's modules, and a
// tag moved to an unsigned image is refused.
func TestPublishPushesSignsAndAttests(t *testing.T) {
	ctx := context.Background()
	addr, caFile := startRegistry(t)
	t.Setenv("COSIGN_PASSWORD", "release-test")
	cosign := Cosign{Path: tool(t, "cosign"), CAFile: caFile}
	keys := t.TempDir()
	key, pub, err := cosign.GenerateKeyPair(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	// The images hold cmd/publish, built as make image builds the manager: a
	// stripped static binary whose build information lists real modules (a
	// test binary's lists none).
	bin := filepath.Join(t.TempDir(), "publish")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/publish")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/publish: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	managerTar, manager := testArchive(t, "retryguard/manager:0.1.0", raw)
	proxyTar, proxy := testArchive(t, "retryguard/proxy:0.1.0", raw)
	out := t.TempDir()
	registry := addr + "/mirror"
	rel, err := Publish(ctx, Options{
		Registry: registry, CAFile: caFile, Images: []string{managerTar, proxyTar},
		Chart: filepath.Join(repoRoot, "charts", "retryguard"), Key: key, Cosign: Cosign{Path: cosign.Path},
		SBOMTool: tool(t, "cyclonedx-gomod"), OutDir: out, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}

	const mainModule = "github.com/retryguard/retryguard/hack/publish"
	for i, want := range []struct {
		tag string
		img v1.Image
	}{{registry + "/retryguard/manager:0.1.0", manager}, {registry + "/retryguard/proxy:0.1.0", proxy}} {
		a := rel.Images[i]
		digest, _ := want.img.Digest()
		if a.Tag != want.tag || a.Digest != digest.String() {
			t.Errorf("pushed %s %s, want %s %s (the archive's own digest)", a.Tag, a.Digest, want.tag, digest)
		}
		got, err := cosign.Verify(ctx, pub, a.Tag)
		if err != nil {
			t.Fatalf("verifying %s: %v", a.Tag, err)
		}
		if got != a.Digest {
			t.Errorf("cosign verified %s at %s, pushed %s", a.Tag, got, a.Digest)
		}
		bom, err := cosign.VerifySBOM(ctx, pub, a.Tag, a.Digest)
		if err != nil {
			t.Fatalf("the SBOM of %s: %v", a.Tag, err)
		}
		if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != mainModule || bom.Metadata.Component.Version != "v0.1.0" {
			t.Errorf("the SBOM of %s describes %s %s (%s), want %s v0.1.0", a.Tag, bom.Metadata.Component.Name,
				bom.Metadata.Component.Version, bom.BOMFormat, mainModule)
		}
		if !slices.ContainsFunc(bom.Components, func(c Component) bool {
			return c.Name == "helm.sh/helm/v3" && c.Version == "v3.22.0"
		}) {
			t.Errorf("the SBOM of %s does not list helm.sh/helm/v3 v3.22.0, which the binary is built with", a.Tag)
		}
		if _, err := os.Stat(a.SBOM); err != nil || filepath.Dir(a.SBOM) != out {
			t.Errorf("the SBOM of %s is not kept in -out: %q (%v)", a.Tag, a.SBOM, err)
		}
	}

	// The chart, at oci://<registry>/charts/retryguard, as helm pulls it.
	ch, err := loader.Load(filepath.Join(repoRoot, "charts", "retryguard"))
	if err != nil {
		t.Fatal(err)
	}
	if want := registry + "/charts/retryguard:" + ch.Metadata.Version; rel.Chart.Tag != want {
		t.Errorf("chart pushed to %s, want %s", rel.Chart.Tag, want)
	}
	if got, err := cosign.Verify(ctx, pub, rel.Chart.Tag); err != nil || got != rel.Chart.Digest {
		t.Errorf("verifying the chart %s: %s, %v; pushed %s", rel.Chart.Tag, got, err, rel.Chart.Digest)
	}
	transport, _ := Transport(caFile)
	helm, err := ChartClient(transport)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := helm.Pull(rel.Chart.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Manifest.Digest != rel.Chart.Digest || pulled.Chart.Meta.Name != "retryguard" {
		t.Errorf("helm pulled %s %s, pushed %s", pulled.Chart.Meta.Name, pulled.Manifest.Digest, rel.Chart.Digest)
	}

	// Another key's signature is no signature.
	other, err := os.MkdirTemp(keys, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, otherPub, err := cosign.GenerateKeyPair(ctx, other); err != nil {
		t.Fatal(err)
	} else if _, err := cosign.Verify(ctx, otherPub, rel.Images[0].Tag); err == nil {
		t.Error("the manager verified with a key that did not sign it")
	}

	// A tag moved to another image, one label changed, is refused; the
	// signed digest still verifies.
	tampered, err := mutate.Config(manager, v1.Config{Entrypoint: []string{"/manager"}, Labels: map[string]string{"tampered": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(rel.Images[0].Tag)
	if err := remote.Write(tag, tampered, remote.WithTransport(transport)); err != nil {
		t.Fatal(err)
	}
	if _, err := cosign.Verify(ctx, pub, rel.Images[0].Tag); err == nil || !strings.Contains(err.Error(), "no signatures found") {
		t.Errorf("verifying the tag moved to an unsigned image: %v, want cosign's \"no signatures found\"", err)
	}
	if got, err := cosign.Verify(ctx, pub, rel.Images[0].Ref()); err != nil || got != rel.Images[0].Digest {
		t.Errorf("the signed digest %s no longer verifies: %s, %v", rel.Images[0].Ref(), got, err)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	_, err := Publish(context.Background(), Options{Registry: "https://registry.example.com", Chart: "missing"})
	if err == nil {
		t.Fatal("Publish took options without images, key or tools")
	}
	for _, want := range []string{"registry \"https://registry.example.com\"", "images", "key is required", "cosign is required",
		"sbom tool is required", "chart: stat missing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	c := Cosign{Path: "cosign"}
	if err := c.Sign(context.Background(), "k", "registry.example.com/retryguard/manager:0.1.0"); err == nil ||
		!strings.Contains(err.Error(), "by digest") {
		t.Errorf("signing by tag: %v, want a refusal that asks for a digest", err)
	}
}

// Transport trusts the CA it is given, and says so when the file holds none.
func TestTransportTrustsTheCA(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Transport(bad); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
	tr, err := Transport("")
	if err != nil || tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil {
		t.Errorf("no CA file: %v, %+v", err, tr.TLSClientConfig)
	}
}
