package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const (
	// NonRootUser is the user and group the manager runs as: distroless's
	// "nonroot". It is numeric because the image has no /etc/passwd and
	// because the Deployment's runAsNonRoot accepts only a numeric user.
	NonRootUser = "65532:65532"
	// BinaryPath is the manager in the image; config/manager and the chart
	// name it as the container's command too.
	BinaryPath = "/manager"
	// DefaultRepository is the image's name without its tag.
	DefaultRepository = "retryguard/manager"
	// DefaultSource is the org.opencontainers.image.source label.
	DefaultSource = "https://github.com/retryguard/retryguard"

	// containerdImageName is the index.json annotation containerd names an
	// imported image by (`ctr images import`); `docker save` writes it too.
	containerdImageName = "io.containerd.image.name"
	// dockerHub is how containerd's normalized names spell the registry of
	// a repository named without one.
	dockerHub = "docker.io"
)

// Metadata is what the image says about itself.
type Metadata struct {
	// Repository and Version make the image's tag, Repository:Version.
	Repository, Version string
	// Revision is the commit the binary was built from; Source is the
	// repository's URL.
	Revision, Source string
	// Created stamps the image and its files; a commit's time keeps a
	// rebuild of the same commit byte-for-byte identical.
	Created time.Time
	// Platform is the binary's GOOS and GOARCH.
	Platform v1.Platform
}

// Tag is the image's tag, Repository:Version.
func (m Metadata) Tag() (name.Tag, error) {
	t, err := name.NewTag(m.Repository + ":" + m.Version)
	if err != nil {
		return name.Tag{}, fmt.Errorf("repository %q and version %q make no image tag: %w", m.Repository, m.Version, err)
	}
	return t, nil
}

func (m Metadata) validate() error {
	var errs []error
	for field, value := range map[string]string{"version": m.Version, "revision": m.Revision, "source": m.Source} {
		if value == "" {
			errs = append(errs, fmt.Errorf("%s is required (it is an OCI label)", field))
		}
	}
	if m.Version != "" {
		if _, err := m.Tag(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.Created.IsZero() {
		errs = append(errs, errors.New("created is required: the commit's time makes rebuilds identical"))
	}
	if m.Platform.OS == "" || m.Platform.Architecture == "" {
		errs = append(errs, fmt.Errorf("platform %q is incomplete: OS and architecture are required", m.Platform.String()))
	}
	return errors.Join(errs...)
}

// Image returns the manager's image: FROM scratch, one layer holding binary
// at BinaryPath, run as NonRootUser, with the OCI labels from m.
func Image(binary []byte, m Metadata) (v1.Image, error) {
	if len(binary) == 0 {
		return nil, errors.New("the manager binary is empty")
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	rootfs, err := rootfsTar(binary, m.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(rootfs)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: m.Created},
		CreatedBy: "make image: COPY manager " + BinaryPath,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: m.Created}
	cf.OS, cf.Architecture, cf.Variant = m.Platform.OS, m.Platform.Architecture, m.Platform.Variant
	cf.Config = v1.Config{
		User:       NonRootUser,
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Labels: map[string]string{
			ocispec.AnnotationSource:   m.Source,
			ocispec.AnnotationRevision: m.Revision,
			ocispec.AnnotationVersion:  m.Version,
			ocispec.AnnotationTitle:    "retryguard-manager",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfsTar is the image's only layer: the manager, owned by root and
// runnable by anyone.
func rootfsTar(binary []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     BinaryPath[1:],
		Mode:     0o755,
		Size:     int64(len(binary)),
		ModTime:  created.UTC(),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(h); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchiveFile writes img to path as one tarball that both containerd
// (`ctr -n k8s.io images import`) and `docker load` take: an OCI image
// layout whose index.json names the image, plus the manifest.json with its
// repo tag that `docker save` writes alongside. The file appears only once
// complete.
func WriteArchiveFile(path string, img v1.Image, m Metadata) error {
	tag, err := m.Tag()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "retryguard-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		containerdImageName:       containerdName(tag),
		ocispec.AnnotationRefName: tag.TagStr(),
	})); err != nil {
		return err
	}
	dockerManifest, err := dockerArchiveManifest(img, tag)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), dockerManifest, 0o644); err != nil {
		return err
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarDir(tmp, dir, m.Created); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// containerdName is tag as containerd normalizes it (docker.io/library/x:t),
// the name the kubelet asks for when a pod names the image tag.
func containerdName(tag name.Tag) string {
	registry := tag.Context().RegistryStr()
	if registry == name.DefaultRegistry {
		registry = dockerHub
	}
	return registry + "/" + tag.Context().RepositoryStr() + ":" + tag.TagStr()
}

// dockerArchiveManifest is manifest.json as `docker save` writes it next to
// an OCI layout: the config and layers by their blob paths, and the repo tag.
func dockerArchiveManifest(img v1.Image, tag name.Tag) ([]byte, error) {
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	entry := tarball.Descriptor{Config: blob(cfg), RepoTags: []string{tag.String()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		entry.Layers = append(entry.Layers, blob(d))
	}
	return json.Marshal(tarball.Manifest{entry})
}

// tarDir writes dir's files to w in lexical order with fixed owners, modes
// and times, so that the archive depends on their contents alone.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(raw))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(raw)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
