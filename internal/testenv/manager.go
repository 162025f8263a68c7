package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/internal/manager"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/webhooks"
)

// EnableWebhooks makes env install config/webhook on start, pointed at a
// local webhook server with a generated serving certificate and CA bundle.
func EnableWebhooks(env *envtest.Environment) {
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: []string{Path("config", "webhook")}}
}

// Features selects what StartManaged's manager serves.
type Features struct {
	Webhooks, Controllers bool
	// ProxyImage is the retryguard-proxy injector's image (--proxy-image);
	// the injector is served with the webhooks either way.
	ProxyImage string
	// Draining, when set, is the drain the webhooks answer to, for a test
	// to turn on; the manager does not drain when its context ends.
	Draining *webhooks.Draining
}

// Everything is what cmd/manager runs.
var Everything = Features{Webhooks: true, Controllers: true}

// ManagerConfig is the manager internal/manager builds, with every flag at
// its default, for a started env: its webhook server listens where env's
// webhook configuration points; there is no metrics endpoint, no probe
// server, no leader election and no drain at the end; and, since suites
// start several managers in one process, controller names need not be
// unique. Callers change what they test.
func ManagerConfig(env *envtest.Environment, limits policygraph.Limits, f Features) manager.Config {
	o := options.Defaults()
	o.Limits = limits
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.LeaderElect = false
	o.ShutdownDrain = 0
	o.EnableWebhooks = f.Webhooks
	o.Injector = webhooks.Injector{Image: f.ProxyImage}
	w := env.WebhookInstallOptions
	o.WebhookPort, o.WebhookCertDir = w.LocalServingPort, w.LocalServingCertDir
	return manager.Config{
		Manager:            o,
		Scheme:             env.Scheme,
		WebhookHost:        w.LocalServingHost,
		WithoutControllers: !f.Controllers,
		Controller:         config.Controller{SkipNameValidation: ptr.To(true)},
		Draining:           f.Draining,
	}
}

// StartManaged runs the manager ManagerConfig describes for a started env
// until ctx ends, returning once it serves (StartManager).
func StartManaged(ctx context.Context, env *envtest.Environment, cfg *rest.Config, limits policygraph.Limits, f Features) (ctrl.Manager, <-chan error, error) {
	return StartManager(ctx, env, cfg, ManagerConfig(env, limits, f))
}

// StartManager builds the manager c describes (internal/manager, as
// cmd/manager does) for a started env, with cfg's identity, runs it until
// ctx ends, and returns once its cache has synced and, when env serves
// webhooks, its webhook server answers TLS. The channel yields Start's
// result.
func StartManager(ctx context.Context, env *envtest.Environment, cfg *rest.Config, c manager.Config) (ctrl.Manager, <-chan error, error) {
	mgr, err := manager.New(ctx, cfg, c)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return mgr, done, fmt.Errorf("manager cache did not sync")
	}
	w := env.WebhookInstallOptions
	if w.LocalServingPort == 0 || len(w.ValidatingWebhooks) == 0 {
		return mgr, done, nil
	}
	addr := net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
	for {
		conn, err := tls.DialWithDialer(
			&net.Dialer{Timeout: time.Second},
			"tcp",
			addr,
			&tls.Config{InsecureSkipVerify: true},
		) //nolint:gosec // a readiness probe of our own local server
		if err == nil {
			_ = conn.Close()
			return mgr, done, nil
		}
		select {
		case err := <-done:
			return mgr, done, fmt.Errorf("manager stopped before serving webhooks: %v", err)
		case <-syncCtx.Done():
			return mgr, done, fmt.Errorf("webhook server not serving on %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Settle waits until mgr's cache holds every RetryPolicy and RetryBudget at
// the resourceVersion the API server has, so that the next admission (which
// reads that cache) sees everything applied before it.
func Settle(ctx context.Context, mgr ctrl.Manager) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		last = settled(ctx, mgr)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the manager's cache did not catch up: %w", errors.Join(last, err))
	}
	return nil
}

func settled(ctx context.Context, mgr ctrl.Manager) error {
	lists := []struct{ live, cached client.ObjectList }{
		{&v1.RetryPolicyList{}, &v1.RetryPolicyList{}},
		{&v1.RetryBudgetList{}, &v1.RetryBudgetList{}},
	}
	for _, l := range lists {
		if err := mgr.GetAPIReader().List(ctx, l.live); err != nil {
			return err
		}
		if err := mgr.GetCache().List(ctx, l.cached); err != nil {
			return err
		}
		if a, b := versions(l.live), versions(l.cached); !maps.Equal(a, b) {
			return fmt.Errorf("cache has %d objects at other versions", len(a))
		}
	}
	return nil
}

func versions(list client.ObjectList) map[string]string {
	out := map[string]string{}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		m := o.(client.Object)
		out[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
		return nil
	})
	return out
}

// Converged waits until the controllers have reconciled every RetryPolicy
// and RetryBudget at its current generation.
func Converged(ctx context.Context, mgr ctrl.Manager) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var done bool
		done, last = converged(ctx, mgr.GetAPIReader())
		return last == nil && done, nil
	})
	if err != nil {
		return fmt.Errorf("the controllers did not converge: %w", errors.Join(last, err))
	}
	return nil
}

func converged(ctx context.Context, r client.Reader) (bool, error) {
	var policies v1.RetryPolicyList
	if err := r.List(ctx, &policies); err != nil {
		return false, err
	}
	for _, p := range policies.Items {
		if p.Status.ObservedGeneration != p.Generation || meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady) == nil {
			return false, nil
		}
	}
	var budgets v1.RetryBudgetList
	if err := r.List(ctx, &budgets); err != nil {
		return false, err
	}
	for _, b := range budgets.Items {
		if b.Status.ObservedGeneration != b.Generation {
			return false, nil
		}
	}
	return true, nil
}
