package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// The zip the stamp hashes is the one the module proxy serves for the tag:
// committed, the tree zips (zip.CreateFromVCS, git archive of the commit, as
// the go command zips a tag) to the same hash as moduleZip makes of the work
// tree, where a file git ignores sits in the runtime and the repository has a
// LICENSE that the nested modules lack.
func TestModuleZipIsTheTagsZip(t *testing.T) {
	if testing.Short() {
		t.Skip("commits a copy of the tree")
	}
	tmp := t.TempDir()
	if err := CopyTree(repoRoot(t), tmp); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(tmp, "LICENSE"), "a license the nested modules inherit\n")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", tmp, "-c", "user.name=release", "-c", "user.email=release@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "the tag")
	writeFile(t, filepath.Join(tmp, "runtime", "cover.out"), "coverage output, which .gitignore names\n")

	_, published, err := tree(tmp, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	for path, dir := range published {
		mv := module.Version{Path: path, Version: "v0.1.0"}
		got, err := zipHash(tmp, dir, mv)
		if err != nil {
			t.Fatal(err)
		}
		var tag bytes.Buffer
		subdir := dir
		if dir == "." {
			subdir = ""
		}
		if err := zip.CreateFromVCS(&tag, mv, tmp, "HEAD", subdir); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "tag.zip")
		if err := os.WriteFile(file, tag.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		want, err := dirhash.HashZip(file, dirhash.Hash1)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: moduleZip hashes %s, the tag's zip %s", dir, got, want)
		}
	}
}
