package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
)

// Cluster is a running local control plane with Retryguard's manager
// (webhooks served for real), kube-controller-manager's garbage collector
// and namespace controller, and an admin kubeconfig on disk, for
// `make demo` and `make dev-cluster`.
type Cluster struct {
	Env               *envtest.Environment
	Config            *rest.Config
	Manager           ctrl.Manager
	ControllerManager *ControllerManager
	KubeconfigPath    string

	stopManager context.CancelFunc
	managerDone <-chan error
}

// Up starts kube-apiserver and etcd with the CRDs and the validating webhook
// configuration installed (serving certificate generated, CA bundle
// injected), then kube-controller-manager (see StartControllerManager), runs
// the manager in-process, and writes an admin kubeconfig to kubeconfigPath
// so that plain `kubectl --kubeconfig ...` works.
func Up(ctx context.Context, kubeconfigPath string, limits policygraph.Limits) (*Cluster, error) {
	env, err := NewEnvironment()
	if err != nil {
		return nil, err
	}
	EnableWebhooks(env)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the local control plane: %w", err)
	}
	c := &Cluster{Env: env, Config: cfg, KubeconfigPath: kubeconfigPath}
	if err := c.start(ctx, limits); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, limits policygraph.Limits) error {
	if err := os.MkdirAll(filepath.Dir(c.KubeconfigPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(c.KubeconfigPath, c.Env.KubeConfig, 0o600); err != nil {
		return err
	}
	var err error
	if c.ControllerManager, err = StartControllerManager(ctx, c.Env, c.Config); err != nil {
		return err
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	c.stopManager = cancel
	c.Manager, c.managerDone, err = StartManaged(mgrCtx, c.Env, c.Config, limits, Everything)
	return err
}

// Stop stops kube-controller-manager and the manager, tears the control
// plane down and removes the kubeconfig.
func (c *Cluster) Stop() error {
	var errs []error
	if c.ControllerManager != nil {
		if err := c.ControllerManager.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("kube-controller-manager: %w", err))
		}
	}
	if c.stopManager != nil {
		c.stopManager()
	}
	if c.managerDone != nil {
		if err := <-c.managerDone; err != nil {
			errs = append(errs, fmt.Errorf("manager: %w", err))
		}
	}
	if err := os.Remove(c.KubeconfigPath); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	return errors.Join(append(errs, c.Env.Stop())...)
}
