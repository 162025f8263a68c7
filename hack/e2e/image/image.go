// Package image builds the e2e node's single-binary images (the pause image
// and the test apps) from Go packages, packed by hack/image/oci exactly as
// `make image` packs the manager. Its functions are safe for concurrent use.
package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/retryguard/retryguard/hack/image/oci"
)

// Config is the image's runtime configuration.
type Config struct {
	// Entrypoint's first element is where the binary lies in the image;
	// /<base name of the package> when empty.
	Entrypoint []string
	// User defaults to oci.NonRootUser.
	User   string
	Labels map[string]string
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

// BinaryImage builds pkg statically and writes it, as image ref, to
// tarPath: one binary, stamped with the Unix epoch so that a rebuild of the
// same source is the same image.
func BinaryImage(ctx context.Context, moduleDir, pkg, tarPath, ref string, cfg Config) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
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
	if len(cfg.Entrypoint) > 0 {
		path = cfg.Entrypoint[0]
	}
	img, err := oci.Image(oci.Spec{Binary: data, Path: path, User: cfg.User, Labels: cfg.Labels,
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, CreatedBy: "e2e: go build " + pkg})
	if err != nil {
		return err
	}
	return oci.WriteArchiveFile(tarPath, img, tag, time.Time{})
}

// FileImage packs a binary that is already built (a static one from a
// distribution's package) as image ref at tarPath, as BinaryImage packs one
// it builds: cfg.Entrypoint[0] is where it lies in the image.
func FileImage(binary, tarPath, ref string, cfg Config) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if len(cfg.Entrypoint) == 0 {
		return fmt.Errorf("%s: an entrypoint names where the binary lies", ref)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	img, err := oci.Image(oci.Spec{Binary: data, Path: cfg.Entrypoint[0], User: cfg.User, Labels: cfg.Labels,
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, CreatedBy: "e2e: " + filepath.Base(binary)})
	if err != nil {
		return err
	}
	return oci.WriteArchiveFile(tarPath, img, tag, time.Time{})
}
