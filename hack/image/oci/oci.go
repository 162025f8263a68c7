// Package oci packs one static binary into a container image, FROM scratch,
// with neither a container engine nor a registry, and writes it as one
// tarball that both `ctr images import` and `docker load` take. `make image`
// packs the manager with it; the e2e suite packs its test apps and the pause
// image with it, so every image a test node runs is built the same way. Its
// functions are safe for concurrent use.
package oci

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
	"strings"
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
	// NonRootUser is the user and group an image runs as unless told
	// otherwise: distroless's "nonroot". It is numeric because the image has
	// no /etc/passwd and because runAsNonRoot accepts only a numeric user.
	NonRootUser = "65532:65532"

	// containerdImageName is the index.json annotation containerd names an
	// imported image by (`ctr images import`); `docker save` writes it too.
	containerdImageName = "io.containerd.image.name"
	// dockerHub is how containerd's normalized names spell the registry of
	// a repository named without one.
	dockerHub = "docker.io"
)

// Spec is what a one-binary image holds.
type Spec struct {
	// Binary is the static executable; Path is where it lies in the image
	// (absolute), and the image's entrypoint.
	Binary []byte
	Path   string
	// User runs the entrypoint; NonRootUser when empty.
	User string
	// Labels are the image config's labels (the OCI annotations, say).
	Labels map[string]string
	// Created stamps the image and its files; a commit's time keeps a
	// rebuild of the same commit byte-for-byte identical. Zero is the Unix
	// epoch.
	Created time.Time
	// Platform is the binary's; OS and Architecture are required.
	Platform v1.Platform
	// CreatedBy is the layer's history entry.
	CreatedBy string
}

// Image returns the image s describes: one OCI layer holding the binary,
// owned by root and runnable by anyone, and nothing else (no shell).
func Image(s Spec) (v1.Image, error) {
	switch {
	case len(s.Binary) == 0:
		return nil, errors.New("the binary is empty")
	case !strings.HasPrefix(s.Path, "/") || len(s.Path) < 2:
		return nil, fmt.Errorf("path %q: want an absolute path in the image, such as /manager", s.Path)
	case s.Platform.OS == "" || s.Platform.Architecture == "":
		return nil, fmt.Errorf("platform %q is incomplete: OS and architecture are required", s.Platform.String())
	}
	created := s.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	user := s.User
	if user == "" {
		user = NonRootUser
	}
	rootfs, err := rootfsTar(s.Binary, s.Path, created)
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
		Created:   v1.Time{Time: created},
		CreatedBy: s.CreatedBy,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = s.Platform.OS, s.Platform.Architecture, s.Platform.Variant
	cf.Config = v1.Config{User: user, Entrypoint: []string{s.Path}, WorkingDir: "/", Labels: s.Labels}
	return mutate.ConfigFile(img, cf)
}

// rootfsTar is the image's only layer: the binary at path.
func rootfsTar(binary []byte, path string, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     path[1:],
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
// layout whose index.json names the image tag, plus the manifest.json with
// its repo tag that `docker save` writes alongside. Its entries are stamped
// mtime (the Unix epoch when zero). The file appears only once complete.
func WriteArchiveFile(path string, img v1.Image, tag name.Tag, mtime time.Time) error {
	if mtime.IsZero() {
		mtime = time.Unix(0, 0)
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
		containerdImageName:       ContainerdName(tag),
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarDir(tmp, dir, mtime); err != nil {
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

// ContainerdName is tag as containerd normalizes it (docker.io/library/x:t),
// the name the kubelet asks for when a pod names the image tag.
func ContainerdName(tag name.Tag) string {
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

// ReadArchiveFile reads back an archive WriteArchiveFile wrote: the image
// its index.json names, byte for byte (the digest `make image` printed), and
// the tag it is named by. It unpacks the archive into dir, from which the
// image's blobs are then read: dir must outlive the image's use.
func ReadArchiveFile(path, dir string) (v1.Image, name.Tag, error) {
	if err := untar(path, dir); err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: %w", path, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s is not an OCI image layout: %w", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, name.Tag{}, err
	}
	if len(im.Manifests) != 1 {
		return nil, name.Tag{}, fmt.Errorf("%s: index.json lists %d manifests, want the one image", path, len(im.Manifests))
	}
	desc := im.Manifests[0]
	tag, err := name.NewTag(desc.Annotations[containerdImageName])
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: index.json's %s annotation names no tag: %w", path, containerdImageName, err)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return nil, name.Tag{}, err
	}
	return img, tag, nil
}

// untar unpacks an archive of plain files and directories, the only entries
// tarDir writes, refusing any that would land outside dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q escapes the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				err = writeFrom(target, tr)
			}
		default:
			err = fmt.Errorf("entry %q has type %c; an image archive holds files and directories only", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
