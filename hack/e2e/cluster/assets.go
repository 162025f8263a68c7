package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/retryguard/retryguard/hack/e2e/image"
)

// Assets finds (building on first use) everything Up needs, given the
// repository's root: the control-plane and node binaries from their cache
// scripts, and the pause image. Progress goes to logf with elapsed times.
func Assets(ctx context.Context, repoRoot string, logf func(string, ...any)) (Options, error) {
	var o Options
	var err error
	step := func(what string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		logf("%s (%s)", what, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	if err = step("control-plane binaries", func() error {
		o.ControlPlaneAssets, err = script(ctx, filepath.Join(repoRoot, "hack", "envtest-assets.sh"))
		return err
	}); err != nil {
		return o, err
	}
	if err = step("node binaries", func() error {
		o.NodeAssets, err = script(ctx, filepath.Join(repoRoot, "hack", "e2e", "node-assets.sh"))
		return err
	}); err != nil {
		return o, err
	}
	if err = step("NetworkPolicy enforcer", func() error {
		o.NetworkPolicyAssets, err = script(ctx, filepath.Join(repoRoot, "hack", "e2e", "netpol-assets.sh"))
		return err
	}); err != nil {
		return o, err
	}
	if err = step("registry", func() error {
		o.RegistryBinary, err = script(ctx, filepath.Join(repoRoot, "hack", "gotool.sh"), "registry")
		return err
	}); err != nil {
		return o, err
	}
	o.PauseImageTarball = filepath.Join(DefaultImageDir, "pause.tar")
	err = step("pause image", func() error {
		return image.BinaryImage(ctx, filepath.Join(repoRoot, "hack", "e2e"), "./pause", o.PauseImageTarball, PauseImage, image.Config{})
	})
	o.Logf = logf
	return o, err
}

// script runs an asset script, passing its progress through to stderr, and
// returns the path it prints.
func script(ctx context.Context, path string, args ...string) (string, error) {
	return Script(ctx, path, args...)
}

// Script runs one of the asset scripts (hack/gotool.sh with a tool's name,
// say) and returns the path, a directory or a binary, it prints last. Its
// stderr goes to the suite's, and its last lines are in the error it fails
// with, so that a log cut to its end still says why.
func Script(ctx context.Context, path string, args ...string) (string, error) {
	var out bytes.Buffer
	tail := &tailBuffer{max: 4 << 10}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(os.Stderr, tail)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", filepath.Base(path), err, tail.String())
	}
	dir := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(dir, '\n'); i >= 0 {
		dir = dir[i+1:]
	}
	return dir, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// RepoRoot walks up from dir to the checkout's root: the directory holding
// the root module's go.mod, with the manager's command beneath it.
func RepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cmd", "manager", "main.go")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "hack", "envtest-assets.sh")); err == nil {
				return d, nil
			}
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("no retryguard checkout above %s", dir)
		}
	}
}
