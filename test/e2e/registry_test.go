package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/retryguard/retryguard/hack/image/oci"
	"github.com/retryguard/retryguard/hack/publish"
)

// The release as the suite published it to the node's registry and then
// verified, before anything is installed from it.
var (
	published *publish.Release
	// managerImage and proxyImage are the verified images, which the chart
	// is installed with, by digest.
	managerImage, proxyImage publish.Artifact
	// chartVersion is the verified chart's, which helm install asks for.
	chartVersion string
)

// registryCosign is cosign as a user runs it against the node's registry.
func registryCosign() publish.Cosign {
	return publish.Cosign{Path: cosignBin, CAFile: node.RegistryCA}
}

// publishAndVerifySpec runs the release path into the node's registry (make
// release-push's: push, sign by digest, attest each image's SBOM), then
// verifies, as docs/release.md tells a user to, each image and its SBOM and
// the chart by tag with the public key, and that a tag moved to an unsigned
// image is refused. Installing uses the digests verified here.
func publishAndVerifySpec(ctx context.Context) {
	keys, err := os.MkdirTemp("", "retryguard-e2e-release-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, keys)
	password := make([]byte, 16)
	_, _ = rand.Read(password)
	// cosign reads the private key's password from the environment only.
	Expect(os.Setenv("COSIGN_PASSWORD", hex.EncodeToString(password))).To(Succeed())
	cosign := registryCosign()
	key, pub, err := cosign.GenerateKeyPair(ctx, keys)
	Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	published, err = publish.Publish(ctx, publish.Options{
		Registry: node.Registry, CAFile: node.RegistryCA, Images: []string{managerTar, proxyTar},
		Chart: filepath.Join(repoRoot, "charts", "retryguard"), Key: key, Cosign: publish.Cosign{Path: cosignBin},
		SBOMTool: sbomTool, Logf: logf,
	})
	Expect(err).NotTo(HaveOccurred())
	record("release push to the node's registry (push, sign, attest)", time.Since(start))

	start = time.Now()
	Expect(published.Images).To(HaveLen(2))
	for i, want := range []string{managerRepository, proxyRepository} {
		a := published.Images[i]
		Expect(a.Repository()).To(Equal(node.Registry + "/" + want))
		digest, err := cosign.Verify(ctx, pub, a.Tag)
		Expect(err).NotTo(HaveOccurred(), "cosign verify %s", a.Tag)
		Expect(digest).To(Equal(a.Digest), "the tag %s resolves to another digest than was pushed and signed", a.Tag)
		bom, err := cosign.VerifySBOM(ctx, pub, a.Tag, digest)
		Expect(err).NotTo(HaveOccurred(), "cosign verify-attestation %s", a.Tag)
		Expect(bom.Metadata.Component.Name).To(Equal("github.com/retryguard/retryguard"), "the SBOM of %s", a.Tag)
		Expect(bom.Components).NotTo(BeEmpty(), "the SBOM of %s lists no module", a.Tag)
	}
	managerImage, proxyImage = published.Images[0], published.Images[1]
	digest, err := cosign.Verify(ctx, pub, published.Chart.Tag)
	Expect(err).NotTo(HaveOccurred(), "cosign verify %s", published.Chart.Tag)
	Expect(digest).To(Equal(published.Chart.Digest))
	chartVersion = published.Chart.Tag[strings.LastIndexByte(published.Chart.Tag, ':')+1:]
	record("cosign verify of the images, their SBOMs and the chart", time.Since(start))

	// The manager with one label changed, pushed to a tag of its own, as a
	// registry an attacker writes to would serve it: no signature is its.
	dir := GinkgoT().TempDir()
	img, _, err := oci.ReadArchiveFile(managerTar, dir)
	Expect(err).NotTo(HaveOccurred())
	cf, err := img.ConfigFile()
	Expect(err).NotTo(HaveOccurred())
	cfg := cf.Config.DeepCopy()
	cfg.Labels = map[string]string{"tampered": "true"}
	tampered, err := mutate.Config(img, *cfg)
	Expect(err).NotTo(HaveOccurred())
	tag, err := name.NewTag(managerImage.Repository() + ":tampered")
	Expect(err).NotTo(HaveOccurred())
	transport, err := publish.Transport(node.RegistryCA)
	Expect(err).NotTo(HaveOccurred())
	Expect(remote.Write(tag, tampered, remote.WithContext(ctx), remote.WithTransport(transport))).To(Succeed())
	_, err = cosign.Verify(ctx, pub, tag.String())
	Expect(err).To(MatchError(ContainSubstring("no signatures found")), "cosign verify of the tampered %s", tag)
}

// expectPulledFromRegistry checks that each of the pod's containers named in
// want runs the image the suite verified, pulled from the node's registry:
// the kubelet reports the digest it resolved (imageID) in that repository.
func expectPulledFromRegistry(pod *corev1.Pod, want map[string]publish.Artifact) {
	GinkgoHelper()
	statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for container, a := range want {
		found := false
		for _, s := range statuses {
			if s.Name != container {
				continue
			}
			found = true
			Expect(s.ImageID).To(Equal(a.Ref()), "pod %s container %s runs an image that is not the registry's", pod.Name, container)
		}
		Expect(found).To(BeTrue(), "pod %s has no status for container %s", pod.Name, container)
	}
}
