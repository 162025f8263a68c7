// Package image builds single-binary container images (FROM scratch) as
// docker-archive tarballs that `ctr images import` loads, with no daemon and
// no registry. Its functions are safe for concurrent use.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NonRootUser is the user every image runs as (distroless's "nonroot").
const NonRootUser = "65532:65532"

// File is one file of the image's only layer.
type File struct {
	Path string // absolute path in the image
	Data []byte
	Mode int64
}

// Config is the image's runtime configuration.
type Config struct {
	Entrypoint []string
	User       string // defaults to NonRootUser
	Labels     map[string]string
}

// Write writes a one-layer image named ref to tarPath.
func Write(tarPath, ref string, files []File, cfg Config) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.User = cfg.User
	if cf.Config.User == "" {
		cf.Config.User = NonRootUser
	}
	cf.Config.Labels = cfg.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(tarPath), 0o755); err != nil {
		return err
	}
	tmp := tarPath + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, tarPath)
}

// BuildGo builds pkg (a package path or ./dir, relative to moduleDir) as a
// static linux binary at out.
func BuildGo(ctx context.Context, moduleDir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, output)
	}
	return nil
}

// BinaryImage builds pkg statically and writes it as a one-binary image whose
// entrypoint is /<base name of out>.
func BinaryImage(ctx context.Context, moduleDir, pkg, tarPath, ref string, cfg Config) error {
	dir, err := os.MkdirTemp("", "retryguard-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bin")
	if err := BuildGo(ctx, moduleDir, pkg, bin); err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	path := "/" + filepath.Base(strings.TrimSuffix(pkg, "/"))
	if len(cfg.Entrypoint) == 0 {
		cfg.Entrypoint = []string{path}
	} else {
		path = cfg.Entrypoint[0]
	}
	return Write(tarPath, ref, []File{{Path: path, Data: data, Mode: 0o755}}, cfg)
}
