package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Dist builds the archive the krew manifest names for this machine's
// platform, writes its sha256 into the manifest in place of the old one,
// and the binary inside reports the release version; the other platforms'
// lines are left as they were.
func TestDistBuildsTheArchivesTheKrewManifestNames(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	if err := CopyTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	const version = "v0.42.1"
	if _, err := Stamp(tmp, version); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(tmp, krewFile))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	host := func(goos, goarch string) bool { return goos == runtime.GOOS && goarch == runtime.GOARCH }
	archives, err := Dist(commandContext(t), tmp, version, out, host)
	if err != nil {
		t.Fatal(err)
	}
	name := "kubectl-retryguard_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	if len(archives) != 1 || filepath.Base(archives[0]) != name {
		t.Fatalf("built %v, want %s alone", archives, name)
	}
	data, err := os.ReadFile(archives[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	after, err := os.ReadFile(filepath.Join(tmp, krewFile))
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	b, a := strings.Split(string(before), "\n"), strings.Split(string(after), "\n")
	for i := range a {
		if a[i] != b[i] {
			changed++
			if a[i] != "    sha256: "+hex.EncodeToString(sum[:]) || !strings.HasSuffix(a[i-1], "/"+version+"/"+name) {
				t.Errorf("%s:%d: %q after %q; want the archive's sha256 under its uri", krewFile, i+1, a[i], a[i-1])
			}
		}
	}
	if changed != 1 {
		t.Errorf("Dist changed %d lines of %s, want the one sha256", changed, krewFile)
	}

	zr, err := gzip.NewReader(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != pluginBinary || hdr.Mode&0o111 == 0 {
		t.Fatalf("archive entry %+v, %v; want an executable %s", hdr, err, pluginBinary)
	}
	bin := filepath.Join(t.TempDir(), pluginBinary)
	f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, tr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Module string }
	if err := json.Unmarshal(got, &v); err != nil || v.Module != version {
		t.Errorf("the archived plugin's version: %s (%v), want module %s", got, err, version)
	}
}
