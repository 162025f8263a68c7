// Package testenv starts the local control plane (kube-apiserver and etcd built
// by hack/envtest-assets.sh) that the test suites, `make demo` and
// `make dev-cluster` share, with Retryguard's CRDs installed.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/internal/manager"
)

// ErrNoAssets says that KUBEBUILDER_ASSETS is not set or holds no binaries.
var ErrNoAssets = errors.New("KUBEBUILDER_ASSETS must name a directory with kube-apiserver and etcd; " +
	"run the tests with `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")

// RepoRoot is the checkout this package was built from, so that suites in
// any package find config/ without relative-path guessing.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Path joins elements onto the repository root.
func Path(elem ...string) string {
	return filepath.Join(append([]string{RepoRoot()}, elem...)...)
}

// AssetsDir returns KUBEBUILDER_ASSETS after checking that it holds the
// control-plane binaries.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", ErrNoAssets
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("%w (missing %s in %s)", ErrNoAssets, bin, dir)
		}
	}
	return dir, nil
}

// Scheme returns the manager's scheme: the built-in types and Retryguard's API.
func Scheme() *runtime.Scheme { return manager.Scheme() }

// StartEnvironment starts NewEnvironment's control plane for one test or
// benchmark, serving the webhooks' configuration when webhooks is set, and
// stops it when tb ends.
func StartEnvironment(tb TB, webhooks bool) (*envtest.Environment, *rest.Config) {
	tb.Helper()
	env, err := NewEnvironment()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	if webhooks {
		EnableWebhooks(env)
	}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatalf("starting the control plane: %v", err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	return env, cfg
}

// NewEnvironment returns an envtest environment with Retryguard's CRDs,
// ready to Start. Callers add webhook options before starting.
func NewEnvironment() (*envtest.Environment, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{Path("config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}, nil
}
