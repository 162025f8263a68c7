package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

var testMeta = Metadata{
	Repository: "retryguard/manager",
	Version:    "0.1.0",
	Revision:   "0123456789abcdef0123456789abcdef01234567",
	Source:     "https://github.com/retryguard/retryguard",
	Created:    time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	Platform:   v1.Platform{OS: "linux", Architecture: "amd64"},
}

// archived is an image archive read back both ways a runtime reads it.
type archived struct {
	// oci is the image that index.json names, as containerd imports it.
	oci         v1.Image
	annotations map[string]string
	// docker is the image that manifest.json tags, as `docker load` reads it.
	docker v1.Image
}

// readArchive reads an archive written by WriteArchive as an OCI image
// layout (through index.json) and as a docker-archive (through
// manifest.json and its repo tag).
func readArchive(t *testing.T, path string, tag string) archived {
	t.Helper()
	dir := t.TempDir()
	untar(t, path, dir)
	if _, err := os.Stat(filepath.Join(dir, ocispec.ImageLayoutFile)); err != nil {
		t.Fatalf("the archive is not an OCI image layout: %v", err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading index.json: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	oci, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	docker, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatalf("reading manifest.json for %s: %v", tag, err)
	}
	ociDigest, _ := oci.Digest()
	dockerConfig, _ := docker.ConfigName()
	ociConfig, _ := oci.ConfigName()
	if dockerConfig != ociConfig {
		t.Errorf("manifest.json names config %s, index.json's manifest %s (%s)", dockerConfig, ociConfig, ociDigest)
	}
	return archived{oci: oci, annotations: desc.Annotations, docker: docker}
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q escapes the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q has type %c; only files and directories are expected", h.Name, h.Typeflag)
		}
	}
}

// rootfs lists the files of img's flattened filesystem with their headers
// and contents.
func rootfs(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	headers, contents := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, contents
		}
		if err != nil {
			t.Fatal(err)
		}
		p := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
		headers[p] = h
		if contents[p], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// checkImage holds an image to what the Deployment expects of it: the
// nonroot user, the manager as entrypoint, the OCI labels, and nothing in
// the filesystem but the manager (no shell to exec into). It returns the
// manager's bytes.
func checkImage(t *testing.T, img v1.Image, m Metadata) []byte {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot)", cf.Config.User)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/manager" {
		t.Errorf("entrypoint %q, want /manager", got)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("cmd %q, want none", cf.Config.Cmd)
	}
	if cf.OS != m.Platform.OS || cf.Architecture != m.Platform.Architecture {
		t.Errorf("platform %s/%s, want %s/%s", cf.OS, cf.Architecture, m.Platform.OS, m.Platform.Architecture)
	}
	if !cf.Created.Time.Equal(m.Created) {
		t.Errorf("created %s, want %s", cf.Created.Time, m.Created)
	}
	for label, want := range map[string]string{
		ocispec.AnnotationSource:   m.Source,
		ocispec.AnnotationRevision: m.Revision,
		ocispec.AnnotationVersion:  m.Version,
	} {
		if got := cf.Config.Labels[label]; got != want {
			t.Errorf("label %s=%q, want %q", label, got, want)
		}
	}
	headers, contents := rootfs(t, img)
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, ok := headers[shell]; ok {
			t.Errorf("the image has a shell: /%s", shell)
		}
	}
	if len(headers) != 1 {
		var paths []string
		for p := range headers {
			paths = append(paths, "/"+p)
		}
		t.Errorf("the filesystem holds %v, want only /manager", paths)
	}
	h, ok := headers["manager"]
	if !ok {
		t.Fatal("no /manager in the image")
	}
	if h.Typeflag != tar.TypeReg || h.Mode&0o555 != 0o555 || h.Mode&0o022 != 0 {
		t.Errorf("/manager is type %c mode %o; want a regular file anyone may run and only root may write", h.Typeflag, h.Mode)
	}
	return contents["manager"]
}

func writeTestArchive(t *testing.T, binary []byte, m Metadata) string {
	t.Helper()
	img, err := Image(binary, m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchiveFile(path, img, m); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImageReadsBackAsBuilt(t *testing.T) {
	binary := []byte("\x7fELF not really a manager")
	path := writeTestArchive(t, binary, testMeta)
	a := readArchive(t, path, "retryguard/manager:0.1.0")
	for view, img := range map[string]v1.Image{"OCI layout": a.oci, "docker-archive": a.docker} {
		t.Run(view, func(t *testing.T) {
			if got := checkImage(t, img, testMeta); !bytes.Equal(got, binary) {
				t.Errorf("/manager holds %q, want the binary packed", got)
			}
		})
	}
	// containerd names an imported image from these two annotations
	// (`ctr -n k8s.io images import`), as it does for `docker save`'s output.
	if got := a.annotations["io.containerd.image.name"]; got != "docker.io/retryguard/manager:0.1.0" {
		t.Errorf("io.containerd.image.name=%q, want docker.io/retryguard/manager:0.1.0", got)
	}
	if got := a.annotations[ocispec.AnnotationRefName]; got != "0.1.0" {
		t.Errorf("%s=%q, want the tag 0.1.0", ocispec.AnnotationRefName, got)
	}
}

func TestImageIsReproducible(t *testing.T) {
	binary := bytes.Repeat([]byte("manager"), 1<<16)
	first, err := os.ReadFile(writeTestArchive(t, binary, testMeta))
	if err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(writeTestArchive(t, binary, testMeta))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same binary and metadata differ")
	}
}

func TestManifestJSONTagsTheImage(t *testing.T) {
	path := writeTestArchive(t, []byte("m"), testMeta)
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(m)
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "retryguard/manager:0.1.0" {
		t.Errorf("manifest.json is %s, want one image tagged retryguard/manager:0.1.0", raw)
	}
}

func TestMetadataIsRequired(t *testing.T) {
	for field, breakIt := range map[string]func(*Metadata){
		"version":    func(m *Metadata) { m.Version = "" },
		"revision":   func(m *Metadata) { m.Revision = "" },
		"source":     func(m *Metadata) { m.Source = "" },
		"repository": func(m *Metadata) { m.Repository = "Not A/Repository" },
		"created":    func(m *Metadata) { m.Created = time.Time{} },
		"platform":   func(m *Metadata) { m.Platform.Architecture = "" },
	} {
		m := testMeta
		breakIt(&m)
		if _, err := Image([]byte("m"), m); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("with a bad %s: error %v, want one naming %s", field, err, field)
		}
	}
	if _, err := Image(nil, testMeta); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Errorf("with no binary: error %v, want one naming the binary", err)
	}
}

// make image packs the retryguard-proxy sidecar with the same packer: its
// binary at its own path, which is the entrypoint the injector relies on
// (the injected container sets only args), and its own title.
func TestTheProxyImageHasItsOwnEntrypoint(t *testing.T) {
	m := testMeta
	m.Repository, m.Path, m.Title = "retryguard/proxy", "/retryguard-proxy", "retryguard-proxy"
	binary := []byte("\x7fELF not really a proxy")
	img, err := Image(binary, m)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/retryguard-proxy" {
		t.Errorf("entrypoint %q, want /retryguard-proxy", got)
	}
	if got := cf.Config.Labels[ocispec.AnnotationTitle]; got != "retryguard-proxy" {
		t.Errorf("title %q, want retryguard-proxy", got)
	}
	headers, contents := rootfs(t, img)
	if len(headers) != 1 || !bytes.Equal(contents["retryguard-proxy"], binary) {
		t.Errorf("the filesystem holds %d files and /retryguard-proxy %q, want only the binary", len(headers), contents["retryguard-proxy"])
	}
}
