package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// CopyTree copies what a clone of the repository at src would hold
// (cloneFiles, as they are in the work tree) into dst, so that a stamped copy
// is what a tag would publish, not the build output beside it.
func CopyTree(src, dst string) error {
	names, err := cloneFiles(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		rel := filepath.FromSlash(name)
		info, err := os.Lstat(filepath.Join(src, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue // a module zip holds regular files only
		}
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// cloneFiles lists, slash-separated, the files a clone of the tree at root
// holds once the work tree is committed: those git tracks and the untracked
// ones it does not ignore. A tree that is not a git work tree of its own is a
// copy CopyTree made, which holds only such files: all of them are listed.
func cloneFiles(root string) ([]string, error) {
	top, err := exec.Command("git", "-C", root, "rev-parse", "--show-toplevel").Output()
	if err == nil && sameDir(strings.TrimSpace(string(top)), root) {
		out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
		if err != nil {
			return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
		}
		var names []string
		for _, name := range bytes.Split(out, []byte{0}) {
			if len(name) > 0 {
				names = append(names, string(name))
			}
		}
		return names, nil
	}
	var names []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	return names, err
}

// sameDir reports whether a and b name one directory.
func sameDir(a, b string) bool {
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

// BuildProxy writes a file-based module proxy (GOPROXY=file://dst, the layout
// of `go help goproxy`) that serves every published module of the tree at root
// at version: its .info, .mod and .zip, and a list naming the one version. The
// zip is the one the module proxy would serve from the tag (moduleZip).
func BuildProxy(root, dst, version string) error {
	_, published, err := tree(root, version)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for modPath, dir := range published {
		escaped, err := module.EscapePath(modPath)
		if err != nil {
			return err
		}
		v := filepath.Join(dst, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(v, 0o755); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path.Join(dir, "go.mod"))))
		if err != nil {
			return err
		}
		for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod} {
			if err := os.WriteFile(filepath.Join(v, name), data, 0o644); err != nil {
				return err
			}
		}
		z, err := os.Create(filepath.Join(v, version+".zip"))
		if err != nil {
			return err
		}
		err = moduleZip(z, root, dir, module.Version{Path: modPath, Version: version})
		if cerr := z.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
