package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// ControllerManagerBinary is kube-controller-manager's name in
	// KUBEBUILDER_ASSETS, where hack/envtest-assets.sh builds it.
	ControllerManagerBinary = "kube-controller-manager"
	// ControllerManagerControllers are the controllers the local cluster
	// runs: the garbage collector (a deleted policy's ConfigMap goes with
	// it) and the namespace controller (a deleted namespace empties and
	// goes). Neither needs a service-account token: both use the admin
	// kubeconfig (--use-service-account-credentials stays false), so the
	// token controller and the API server's signing key are not involved.
	ControllerManagerControllers = "garbage-collector-controller,namespace-controller"
	// CollectionDeadline is how soon a deleted policy's ConfigMap is gone
	// from the local cluster; the suite and `make demo` hold it to this.
	CollectionDeadline = 5 * time.Second
	// DefaultControllerManagerReadyTimeout bounds the wait for the garbage
	// collector to collect its first object.
	DefaultControllerManagerReadyTimeout = 90 * time.Second
	// controllerManagerStopGrace is how long Stop waits after SIGTERM.
	controllerManagerStopGrace = 10 * time.Second
)

// ControllerManager is a kube-controller-manager process running
// ControllerManagerControllers against a local control plane. Its methods
// are not safe for concurrent use.
type ControllerManager struct {
	// LogPath is the process's log, kept until Stop.
	LogPath string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's exit, once done is closed
}

// ControllerManagerPath returns kube-controller-manager in
// KUBEBUILDER_ASSETS.
func ControllerManagerPath() (string, error) {
	dir, err := AssetsDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, ControllerManagerBinary)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w (missing %s in %s; a cache built before it was added gets it from hack/envtest-assets.sh)",
			ErrNoAssets, ControllerManagerBinary, dir)
	}
	return bin, nil
}

// StartControllerManager runs kube-controller-manager against env, with
// env's admin credentials, and returns once the garbage collector has
// collected an object of its own, which it can do only once its graph of
// every resource (the CRDs installed by env included) is in sync.
func StartControllerManager(ctx context.Context, env *envtest.Environment, cfg *rest.Config) (*ControllerManager, error) {
	bin, err := ControllerManagerPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "retryguard-kcm-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	logFile, err := os.Create(filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers="+ControllerManagerControllers,
		"--leader-elect=false",
		// No serving endpoint: nothing scrapes it, and parallel suites
		// would fight over its port.
		"--secure-port=0",
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("starting %s: %w", bin, err), os.RemoveAll(dir))
	}
	m := &ControllerManager{LogPath: logFile.Name(), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { m.err = cmd.Wait(); close(m.done) }()
	if err := m.waitCollecting(ctx, cfg, DefaultControllerManagerReadyTimeout); err != nil {
		return nil, errors.Join(fmt.Errorf("kube-controller-manager: %w\n%s", err, m.logTail()), m.Stop())
	}
	return m, nil
}

// waitCollecting creates an owner and a dependent in kube-system, deletes
// the owner, and waits until the garbage collector has deleted the
// dependent.
func (m *ControllerManager) waitCollecting(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, GenerateName: "gc-probe-owner-"}}
	if err := c.Create(ctx, owner); err != nil {
		return err
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: metav1.NamespaceSystem, GenerateName: "gc-probe-dependent-",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}
	if err := c.Create(ctx, dependent); err != nil {
		return err
	}
	if err := c.Delete(ctx, owner); err != nil {
		return err
	}
	exited := func() error {
		select {
		case <-m.done:
			return fmt.Errorf("exited: %v", m.err)
		default:
			return nil
		}
	}
	_, err = Gone(ctx, c, dependent, timeout, exited)
	if err != nil {
		return fmt.Errorf("the garbage collector did not collect a probe object within %s: %w", timeout, err)
	}
	return nil
}

// Gone waits up to within for obj to be NotFound and returns how long that
// took. Each check also asks each of stop whether to give up.
func Gone(ctx context.Context, r client.Reader, obj client.Object, within time.Duration, stop ...func() error) (time.Duration, error) {
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		for _, s := range stop {
			if err := s(); err != nil {
				return false, err
			}
		}
		err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	return time.Since(start), err
}

// logTail is the end of the process's log, for errors.
func (m *ControllerManager) logTail() string {
	raw, err := os.ReadFile(m.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "last lines of its log:\n" + strings.TrimRight(string(bytes.Join(lines, []byte("\n"))), "\n")
}

// Stop ends the process (SIGTERM, then SIGKILL after a grace period) and
// removes its kubeconfig and log.
func (m *ControllerManager) Stop() error {
	select {
	case <-m.done:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(controllerManagerStopGrace):
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
	return os.RemoveAll(m.dir)
}
