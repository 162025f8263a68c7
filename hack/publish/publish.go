// Package publish pushes a Retryguard release to an OCI registry, signs what
// it pushed and attaches each image's SBOM, as docs/release.md describes:
//
//   - each image archive `make image` wrote (the manager, the proxy) goes to
//     <registry>/<its repository>:<its tag>, byte for byte, so that its digest
//     is the one `make image` printed;
//   - the chart goes to oci://<registry>/charts as `helm push` puts it
//     (<registry>/charts/retryguard:<version>), through Helm's own registry
//     client;
//   - cosign signs each by digest with the release key, and attests each
//     image's CycloneDX SBOM, which cyclonedx-gomod writes from the Go build
//     information of the binary inside the image.
//
// Cosign.Verify and Cosign.VerifySBOM check a release as a user does before
// installing it.
package publish

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/retryguard/retryguard/hack/image/oci"
)

// ChartRepository is where under the registry the chart goes: `helm push
// retryguard-X.Y.Z.tgz oci://<registry>/charts` names it
// <registry>/charts/retryguard:X.Y.Z, and users install it with `helm install
// oci://<registry>/charts/retryguard --version X.Y.Z`.
const ChartRepository = "charts"

// Options say what to push where, and with which key.
type Options struct {
	// Registry is the registry and an optional path under it
	// (registry.example.com or registry.example.com/team), without a scheme:
	// only HTTPS registries are spoken to.
	Registry string
	// CAFile, when set, is a PEM CA the registry's certificate chains to,
	// trusted besides the system's roots (by the pushes and by cosign).
	CAFile string
	// Images are image archives written by `make image` (hack/image/oci).
	Images []string
	// Chart is the chart's directory.
	Chart string
	// Key is cosign's private key; COSIGN_PASSWORD holds its password.
	Key string
	// Cosign signs; its CAFile is set from CAFile when empty.
	Cosign Cosign
	// SBOMTool is the cyclonedx-gomod binary (hack/gotool.sh cyclonedx-gomod).
	SBOMTool string
	// OutDir keeps each image's SBOM, <image's base name>.cdx.json, for the
	// release's assets; empty keeps them in a directory removed at the end.
	OutDir string
	// Logf reports each step; nil discards it.
	Logf func(format string, args ...any)
}

// Artifact is one thing pushed.
type Artifact struct {
	// Tag is where it was pushed, <registry>/<repository>:<tag>.
	Tag string
	// Digest is the manifest's, sha256:…, which the signature covers.
	Digest string
	// SBOM is the attested SBOM's file, for an image kept in OutDir.
	SBOM string
}

// Repository is Tag without its tag.
func (a Artifact) Repository() string { return a.Tag[:strings.LastIndexByte(a.Tag, ':')] }

// Ref names the artifact by digest, <registry>/<repository>@sha256:….
func (a Artifact) Ref() string { return a.Repository() + "@" + a.Digest }

// Release is what Publish pushed.
type Release struct {
	Images []Artifact
	Chart  Artifact
}

func (o *Options) validate() error {
	var errs []error
	if o.Registry == "" || strings.Contains(o.Registry, "://") {
		errs = append(errs, fmt.Errorf("registry %q: want host[:port][/path], without a scheme", o.Registry))
	}
	if len(o.Images) == 0 {
		errs = append(errs, errors.New("images: no image archive given"))
	}
	for field, path := range map[string]string{"chart": o.Chart, "key": o.Key, "cosign": o.Cosign.Path, "sbom tool": o.SBOMTool} {
		if path == "" {
			errs = append(errs, fmt.Errorf("%s is required", field))
		} else if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
	}
	return errors.Join(errs...)
}

// Publish pushes o's images and chart, signs each and attests each image's
// SBOM. It stops at the first failure: a release is never left with an
// artifact that says it is signed and is not.
func Publish(ctx context.Context, o Options) (*Release, error) {
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	o.Cosign.CAFile = cmp.Or(o.Cosign.CAFile, o.CAFile)
	work, err := os.MkdirTemp("", "retryguard-publish-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := o.Cosign.Offline(ctx, work); err != nil {
		return nil, err
	}
	sbomDir := cmp.Or(o.OutDir, work)
	if err := os.MkdirAll(sbomDir, 0o755); err != nil {
		return nil, err
	}
	transport, err := Transport(o.CAFile)
	if err != nil {
		return nil, err
	}
	rel := &Release{}
	for i, archive := range o.Images {
		a, err := pushImage(ctx, o, transport, archive, filepath.Join(work, fmt.Sprintf("image-%d", i)), sbomDir, logf)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", archive, err)
		}
		rel.Images = append(rel.Images, a)
	}
	if rel.Chart, err = pushChart(ctx, o, transport, work, logf); err != nil {
		return nil, fmt.Errorf("publish %s: %w", o.Chart, err)
	}
	return rel, nil
}

func pushImage(ctx context.Context, o Options, transport http.RoundTripper, archive, dir, sbomDir string, logf func(string, ...any)) (Artifact, error) {
	img, local, err := oci.ReadArchiveFile(archive, dir)
	if err != nil {
		return Artifact{}, err
	}
	tag, err := name.NewTag(o.Registry + "/" + local.Context().RepositoryStr() + ":" + local.TagStr())
	if err != nil {
		return Artifact{}, fmt.Errorf("registry %q and image %s make no tag: %w", o.Registry, local, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Artifact{}, err
	}
	a := Artifact{Tag: tag.String(), Digest: digest.String()}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(transport),
		remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return Artifact{}, fmt.Errorf("pushing %s: %w", tag, err)
	}
	logf("pushed %s (%s)", a.Tag, a.Digest)
	if err := o.Cosign.Sign(ctx, o.Key, a.Ref()); err != nil {
		return Artifact{}, err
	}
	logf("signed %s", a.Ref())
	a.SBOM = filepath.Join(sbomDir, filepath.Base(local.Context().RepositoryStr())+".cdx.json")
	if err := writeSBOM(ctx, o.SBOMTool, img, local.TagStr(), a.SBOM, dir); err != nil {
		return Artifact{}, err
	}
	if err := o.Cosign.AttestSBOM(ctx, o.Key, a.Ref(), a.SBOM); err != nil {
		return Artifact{}, err
	}
	logf("attested the SBOM of %s (%s)", a.Ref(), a.SBOM)
	if o.OutDir == "" {
		a.SBOM = ""
	}
	return a, nil
}

func pushChart(ctx context.Context, o Options, transport http.RoundTripper, work string, logf func(string, ...any)) (Artifact, error) {
	ch, err := loader.Load(o.Chart)
	if err != nil {
		return Artifact{}, err
	}
	// What `helm package` writes, and `helm push` then reads.
	tgz, err := chartutil.Save(ch, work)
	if err != nil {
		return Artifact{}, err
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		return Artifact{}, err
	}
	client, err := ChartClient(transport)
	if err != nil {
		return Artifact{}, err
	}
	ref := o.Registry + "/" + ChartRepository + "/" + ch.Name() + ":" + ch.Metadata.Version
	if _, err := name.NewTag(ref); err != nil {
		return Artifact{}, fmt.Errorf("registry %q and chart %s %s make no tag: %w", o.Registry, ch.Name(), ch.Metadata.Version, err)
	}
	res, err := client.Push(data, ref, registry.PushOptStrictMode(true))
	if err != nil {
		return Artifact{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	a := Artifact{Tag: ref, Digest: res.Manifest.Digest}
	logf("pushed %s (%s)", a.Tag, a.Digest)
	if err := o.Cosign.Sign(ctx, o.Key, a.Ref()); err != nil {
		return Artifact{}, err
	}
	logf("signed %s", a.Ref())
	return a, ctx.Err()
}

// Transport is an HTTPS transport that trusts the system's roots and the CA
// in caFile, when given.
func Transport(caFile string) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return t, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("registry CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("registry CA %s: no PEM certificate in it", caFile)
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// ChartClient is Helm's registry client, as `helm push` and `helm install
// oci://` make it, over transport and with the credentials `docker login`
// or `cosign login` stored, so that one login serves the images, the chart
// and the signatures.
func ChartClient(transport http.RoundTripper) (*registry.Client, error) {
	return registry.NewClient(
		registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(dockerConfig()),
		registry.ClientOptHTTPClient(&http.Client{Transport: transport}),
	)
}

// dockerConfig is the credentials file go-containerregistry's and cosign's
// default keychain read.
func dockerConfig() string {
	if dir := os.Getenv("DOCKER_CONFIG"); dir != "" {
		return filepath.Join(dir, "config.json")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".docker", "config.json")
}
