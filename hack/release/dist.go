package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// pluginPackage is the plugin's main package, and pluginBinary the name
// kubectl finds it by.
const (
	pluginPackage = "./cmd/kubectl-retryguard"
	pluginBinary  = "kubectl-retryguard"
)

// krewPlatform is a platform's uri and sha256 in the krew manifest: the
// archive's name gives the os and arch, and the sha256 line follows the uri.
var krewPlatform = regexp.MustCompile(`(?m)^([ \t]*uri:[ \t]*\S*/(kubectl-retryguard_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz)\n[ \t]*sha256:[ \t]*)(\S*)$`)

// Dist builds the plugin for every platform the krew manifest lists (those
// keep selects), each as the tar.gz its uri names, in dir, and writes each
// archive's sha256 into the manifest. The build is reproducible (-trimpath,
// no VCS stamp, fixed archive times), and stamps version as the plugin's
// own (main.releaseVersion), since a build from a checkout has no module
// version in its build information. It returns the archives' paths.
func Dist(ctx context.Context, root, version, dir string, keep func(goos, goarch string) bool) ([]string, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	file := filepath.Join(root, krewFile)
	manifest, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var archives []string
	var buildErr error
	out := krewPlatform.ReplaceAllFunc(manifest, func(m []byte) []byte {
		g := krewPlatform.FindSubmatch(m)
		name, goos, goarch := string(g[2]), string(g[3]), string(g[4])
		if buildErr != nil || !keep(goos, goarch) {
			return m
		}
		sum, err := buildArchive(ctx, root, version, goos, goarch, filepath.Join(dir, name))
		if err != nil {
			buildErr = err
			return m
		}
		archives = append(archives, filepath.Join(dir, name))
		return append(append([]byte{}, g[1]...), sum...)
	})
	if buildErr != nil {
		return archives, buildErr
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("%s: no platform to build (no line matches %s)", krewFile, krewPlatform)
	}
	return archives, os.WriteFile(file, out, 0o644)
}

// buildArchive builds the plugin for goos/goarch into a tar.gz at path and
// returns its sha256 in hex.
func buildArchive(ctx context.Context, root, version, goos, goarch, path string) (string, error) {
	tmp, err := os.MkdirTemp("", "retryguard-dist-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, pluginBinary)
	cmd := goCommand(ctx, root, append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0"),
		"build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X main.releaseVersion="+version, "-o", bin, pluginPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s/%s: %w\n%s", pluginPackage, goos, goarch, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf) // no name and no time in the header: reproducible
	tw := tar.NewWriter(zw)
	hdr := &tar.Header{Name: pluginBinary, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}
