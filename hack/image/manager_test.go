package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The image that `make image` wrote, and the binary it packed; `make
// image-check` sets both.
const (
	envArchive = "RETRYGUARD_IMAGE_ARCHIVE"
	envBinary  = "RETRYGUARD_IMAGE_BINARY"
)

// TestManagerImage reads back the archive `make image` built and holds it
// to what a Deployment of Retryguard needs: the static manager binary as the
// entrypoint, run as nonroot, labelled with its version and revision,
// tagged with the chart's appVersion, and no shell.
func TestManagerImage(t *testing.T) {
	archive, binPath := os.Getenv(envArchive), os.Getenv(envBinary)
	if archive == "" || binPath == "" {
		t.Fatalf("%s and %s name the image and the binary `make image` built; run `make image-check`", envArchive, envBinary)
	}
	version := appVersion(t)
	a := readArchive(t, archive, "retryguard/manager:"+version)
	cf, err := a.oci.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := cf.Config.Labels
	want := Metadata{
		Version:  version,
		Revision: labels[ocispec.AnnotationRevision],
		Source:   "https://github.com/retryguard/retryguard",
		Created:  cf.Created.Time,
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
	}
	if !regexp.MustCompile(`^([0-9a-f]{40}|unknown)$`).MatchString(want.Revision) {
		t.Errorf("revision label %q is neither a commit nor unknown", want.Revision)
	}
	manager := checkImage(t, a.oci, want)
	checkImage(t, a.docker, want)

	built, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(manager, built) {
		t.Fatalf("/manager (%d bytes) is not %s (%d bytes)", len(manager), binPath, len(built))
	}
	info, err := buildinfo.Read(bytes.NewReader(manager))
	if err != nil {
		t.Fatalf("/manager is not a Go binary: %v", err)
	}
	if want := "github.com/retryguard/retryguard/cmd/manager"; info.Path != want {
		t.Errorf("/manager is %s, want the manager (%s)", info.Path, want)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for key, value := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux"} {
		if settings[key] != value {
			t.Errorf("/manager was built with %s=%q, want %q", key, settings[key], value)
		}
	}
	if rev, ok := settings["vcs.revision"]; ok && rev != want.Revision {
		t.Errorf("the revision label says %s, the binary was built from %s", want.Revision, rev)
	}
	f, err := elf.NewFile(bytes.NewReader(manager))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/manager is dynamically linked; FROM scratch has no loader for it")
		}
	}
}

// appVersion is the chart's appVersion, the tag the chart pulls by default.
func appVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "retryguard", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return string(m[1])
}
