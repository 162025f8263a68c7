package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// Tidy runs `go mod tidy` in every published module of the tree at root.
// go mod tidy ignores go.work, and a published module requires its siblings
// at the release version, which may not be tagged yet; so for the duration of
// the tidy every other published module is replaced by its directory, as the
// workspace resolves it, and the replaces are dropped again afterwards. A
// directory has no checksum, so the tidy drops the siblings' go.sum lines that
// the stamp wrote (writeSums); they are put back as they were. A failed tidy
// leaves the go.mod and go.sum as they were.
func Tidy(ctx context.Context, root string, log io.Writer) error {
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
		if err := tidyOne(ctx, root, dir, published); err != nil {
			return err
		}
	}
	return nil
}

func tidyOne(ctx context.Context, root, dir string, published map[string]string) (err error) {
	file := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
	sumFile := filepath.Join(filepath.Dir(file), "go.sum")
	orig, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	origSum, err := os.ReadFile(sumFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	siblings, err := siblingSums(sumFile, published)
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
			werr := os.Remove(sumFile)
			if origSum != nil {
				werr = os.WriteFile(sumFile, origSum, 0o644)
			}
			if werr != nil && !errors.Is(werr, fs.ErrNotExist) {
				err = fmt.Errorf("%w; restoring %s: %v", err, sumFile, werr)
			}
		}
	}()
	cmd := goCommand(ctx, filepath.Dir(file), append(os.Environ(), "GOWORK=off"), "mod", "tidy")
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
	if err := writeModFile(file, f); err != nil {
		return err
	}
	_, err = setSiblingSums(sumFile, published, siblings)
	return err
}

func writeModFile(file string, f *modfile.File) error {
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o644)
}
