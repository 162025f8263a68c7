package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// Tidy runs `go mod tidy` in every published module of the tree at root.
// go mod tidy ignores go.work, and a published module requires its siblings
// at the release version, which may not be tagged yet; so for the duration of
// the tidy every other published module is replaced by its directory, as the
// workspace resolves it, and the replaces are dropped again afterwards. A
// failed tidy leaves the go.mod as it was.
func Tidy(root string, log io.Writer) error {
	mods, err := modules(root)
	if err != nil {
		return err
	}
	published, err := publishedPaths(mods)
	if err != nil {
		return err
	}
	for _, dir := range Published {
		fmt.Fprintf(log, "go mod tidy in %s\n", dir)
		if err := tidyOne(root, dir, published); err != nil {
			return err
		}
	}
	return nil
}

func tidyOne(root, dir string, published map[string]string) (err error) {
	file := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
	orig, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(file, orig, nil)
	if err != nil {
		return err
	}
	var replaced []string
	for path, sibling := range published {
		if sibling == dir {
			continue
		}
		rel, err := filepath.Rel(filepath.Join(root, filepath.FromSlash(dir)), filepath.Join(root, filepath.FromSlash(sibling)))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !strings.HasPrefix(rel, "../") {
			rel = "./" + rel // a directory replacement starts with ./ or ../
		}
		if err := f.AddReplace(path, "", rel, ""); err != nil {
			return err
		}
		replaced = append(replaced, path)
	}
	if err := writeModFile(file, f); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if werr := os.WriteFile(file, orig, 0o644); werr != nil {
				err = fmt.Errorf("%w; restoring %s: %v", err, file, werr)
			}
		}
	}()
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir, cmd.Env = filepath.Dir(file), append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod tidy in %s: %w\n%s", dir, err, out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if f, err = modfile.Parse(file, data, nil); err != nil {
		return err
	}
	for _, path := range replaced {
		if err := f.DropReplace(path, ""); err != nil {
			return err
		}
	}
	return writeModFile(file, f)
}

func writeModFile(file string, f *modfile.File) error {
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o644)
}
