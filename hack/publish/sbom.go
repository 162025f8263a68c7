package publish

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// writeSBOM writes the CycloneDX SBOM of img's entrypoint, the one binary in
// each of our images, to out: cyclonedx-gomod reads the modules, their
// versions and sums, and the Go toolchain from the binary's build information
// (what `go version -m` prints), which a stripped binary keeps. The SBOM
// describes the binary as it is in the image, not a build beside it. Serial
// number and timestamp are left out, so that the same image has the same SBOM.
func writeSBOM(ctx context.Context, tool string, img v1.Image, version, out, dir string) error {
	bin, err := entrypoint(img, dir)
	if err != nil {
		return err
	}
	args := []string{"bin", "-json", "-noserial", "-notimestamp", "-output", out}
	// The main module's version: a binary built from a checkout says (devel).
	if version != "" && version[0] >= '0' && version[0] <= '9' {
		args = append(args, "-version", "v"+version)
	}
	cmd := exec.CommandContext(ctx, tool, append(args, bin)...)
	if outb, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(tool), strings.Join(args, " "), err, outb)
	}
	return nil
}

// entrypoint copies img's entrypoint out of its filesystem into dir and
// returns its path. cyclonedx-gomod runs `go version -m`, which takes only
// an executable file.
func entrypoint(img v1.Image, dir string) (string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	if len(cf.Config.Entrypoint) == 0 {
		return "", errors.New("the image has no entrypoint to describe")
	}
	want := strings.TrimPrefix(path.Clean(cf.Config.Entrypoint[0]), "/")
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("the entrypoint %s is not in the image", cf.Config.Entrypoint[0])
		}
		if err != nil {
			return "", err
		}
		if strings.TrimPrefix(path.Clean("/"+h.Name), "/") != want || h.Typeflag != tar.TypeReg {
			continue
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			return "", err
		}
		bin := filepath.Join(dir, "entrypoint-"+path.Base(want))
		return bin, os.WriteFile(bin, buf.Bytes(), 0o755)
	}
}
