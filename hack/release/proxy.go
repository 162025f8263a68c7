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
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// CopyTree copies what a clone of the repository at src would hold (the files
// git tracks plus the untracked ones it does not ignore, as they are in the
// work tree) into dst, so that a stamped copy is what a tag would publish, not
// the build output beside it.
func CopyTree(src, dst string) error {
	out, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files in %s: %w", src, err)
	}
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		rel := filepath.FromSlash(string(name))
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

// BuildProxy writes a file-based module proxy (GOPROXY=file://dst, the layout
// of `go help goproxy`) that serves every published module of the tree at root
// at version: its .info, .mod and .zip, and a list naming the one version. The
// zip is made as the Go command makes one from a tag (golang.org/x/mod/zip),
// so nested modules and their files are left out of their parent's zip.
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
		err = zip.CreateFromDir(z, module.Version{Path: modPath, Version: version}, filepath.Join(root, filepath.FromSlash(dir)))
		if cerr := z.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("zip %s@%s: %w", modPath, version, err)
		}
	}
	return nil
}
