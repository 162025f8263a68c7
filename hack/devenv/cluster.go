package devenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Cluster is a running local control plane with an admin kubeconfig on disk,
// for `make demo` and `make dev-cluster`.
type Cluster struct {
	Env            *envtest.Environment
	Config         *rest.Config
	KubeconfigPath string
}

// StartCluster starts env (from NewEnvironment, possibly with webhook options
// added) and writes an admin kubeconfig to kubeconfigPath, so that plain
// `kubectl --kubeconfig ...` works against it.
func StartCluster(env *envtest.Environment, kubeconfigPath string) (*Cluster, error) {
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the local control plane: %w", err)
	}
	c := &Cluster{Env: env, Config: cfg, KubeconfigPath: kubeconfigPath}
	if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o755); err != nil {
		return nil, c.stopWith(err)
	}
	if err := os.WriteFile(kubeconfigPath, env.KubeConfig, 0o600); err != nil {
		return nil, c.stopWith(err)
	}
	return c, nil
}

func (c *Cluster) stopWith(err error) error {
	if stopErr := c.Env.Stop(); stopErr != nil {
		return fmt.Errorf("%w (and stopping: %v)", err, stopErr)
	}
	return err
}

// Stop tears the control plane down and removes the kubeconfig.
func (c *Cluster) Stop() error {
	_ = os.Remove(c.KubeconfigPath)
	return c.Env.Stop()
}
