package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var linux = v1.Platform{OS: "linux", Architecture: "amd64"}

// An app image for the e2e node: its own path, the default user, and it
// loads back through docker-archive's manifest.json with its tag.
func TestAnAppImageReadsBack(t *testing.T) {
	img, err := Image(Spec{Binary: []byte("app"), Path: "/vendor", Platform: linux})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("retryguard-e2e/vendor:e2e")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nested", "vendor.tar")
	if err := WriteArchiveFile(path, img, tag, time.Time{}); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("docker load's view of %s: %v", path, err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/vendor" {
		t.Errorf("entrypoint %q, want [/vendor]", got)
	}
	if cf.Config.User != NonRootUser {
		t.Errorf("user %q, want the default %q", cf.Config.User, NonRootUser)
	}
	if cf.Created.Unix() != 0 {
		t.Errorf("created %v, want the Unix epoch for a zero Created", cf.Created)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func TestSpecIsChecked(t *testing.T) {
	for what, s := range map[string]Spec{
		"binary":   {Path: "/x", Platform: linux},
		"path":     {Binary: []byte("x"), Path: "x", Platform: linux},
		"platform": {Binary: []byte("x"), Path: "/x", Platform: v1.Platform{OS: "linux"}},
	} {
		if _, err := Image(s); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("with a bad %s: error %v, want one naming it", what, err)
		}
	}
}

func TestContainerdNameIsNormalized(t *testing.T) {
	for in, want := range map[string]string{
		"retryguard/manager:0.1.0":        "docker.io/retryguard/manager:0.1.0",
		"manager:dev":                     "docker.io/library/manager:dev",
		"ghcr.io/retryguard/manager:v1.2": "ghcr.io/retryguard/manager:v1.2",
		"localhost:5000/manager:0.1.0":    "localhost:5000/manager:0.1.0",
	} {
		tag, err := name.NewTag(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ContainerdName(tag); got != want {
			t.Errorf("ContainerdName(%s) = %s, want %s", in, got, want)
		}
	}
}

// What publishing reads back is the image as written, digest and tag.
func TestReadArchiveFileIsTheImageWritten(t *testing.T) {
	img, err := Image(Spec{Binary: []byte("app"), Path: "/app", Platform: linux})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("retryguard/proxy:0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "proxy.tar")
	if err := WriteArchiveFile(path, img, tag, time.Time{}); err != nil {
		t.Fatal(err)
	}
	back, backTag, err := ReadArchiveFile(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got, _ := back.Digest(); got != want {
		t.Errorf("digest read back %s, written %s", got, want)
	}
	if backTag.Context().RepositoryStr() != "retryguard/proxy" || backTag.TagStr() != "0.1.0" {
		t.Errorf("tag read back %s, written %s", backTag, tag)
	}
	if _, _, err := ReadArchiveFile(filepath.Join(t.TempDir(), "missing.tar"), t.TempDir()); err == nil {
		t.Error("a missing archive read back without an error")
	}
}
