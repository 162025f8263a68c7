// Package manager is the manager's one composition root: New builds
// Retryguard's controller-runtime manager (its metrics, probe and webhook
// servers, the field indexes, the controllers, the validating webhooks and
// the proxy injector, the certificate rotation, the readiness checks and
// the drain) from the manager's options, and Run does so from its flags.
// cmd/manager runs Run; the test suites, make demo and make dev-cluster build
// the same manager with New through internal/testenv.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/webhooks"
)

// Scheme returns a scheme with the built-in types and Retryguard's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(policyv1alpha1.AddToScheme(s))
	return s
}

// Config is what New builds from: the manager's options (its flags), and
// what only a process other than the deployed manager varies.
type Config struct {
	options.Manager
	// Scheme is the manager's scheme; nil: Scheme().
	Scheme *runtime.Scheme
	// WebhookHost is the address the webhook server binds; "": every address.
	WebhookHost string
	// LeaderElectionNamespace is where the lease is held; "": the pod's own
	// namespace (a manager outside a cluster must name one to elect).
	LeaderElectionNamespace string
	// WithoutControllers leaves the controllers out, for suites that
	// exercise admission alone.
	WithoutControllers bool
	// Controller applies to every controller; a process that builds the
	// manager more than once skips the unique-name check.
	Controller config.Controller
	// Draining is the drain the webhooks answer to; nil: the manager's own,
	// which Start turns on when its context ends.
	Draining *webhooks.Draining
}

// Manager is Retryguard's manager as New builds it.
type Manager struct {
	ctrl.Manager
	draining *webhooks.Draining
	opts     options.Manager
}

// New validates c and builds the manager for cfg. ctx bounds the setup
// only; Start runs the manager.
func New(ctx context.Context, cfg *rest.Config, c Config) (*Manager, error) {
	o := c.Manager
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if c.Scheme == nil {
		c.Scheme = Scheme()
	}
	m := &Manager{draining: c.Draining, opts: o}
	if m.draining == nil {
		m.draining = &webhooks.Draining{}
	}
	var tlsOpts []func(*tls.Config)
	if !o.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure, TLSOpts: tlsOpts}
	if o.MetricsCertDir != "" {
		cert := &servingCert{dir: o.MetricsCertDir}
		metricsOpts.TLSOpts = append(slices.Clip(tlsOpts), func(c *tls.Config) { c.GetCertificate = cert.getCertificate })
	}
	if o.MetricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	// Refusals are counted by code in retryguard_admission_denied_total.
	serverOpts := webhooks.ServerOptions(o.WebhookPort, o.WebhookCertDir, o.WebhookClientCAName, tlsOpts)
	serverOpts.Host = c.WebhookHost
	var webhookServer webhook.Server = webhook.NewServer(serverOpts)
	rotation := certRotation{o.CertRotation}
	certsReady := make(chan struct{})
	if rotation.Enabled {
		// The server cannot start before its certificate exists: it starts
		// once the rotator has written and mounted it and injected its CA.
		webhookServer = &startAfter{Server: webhookServer, ready: certsReady}
	}
	var err error
	m.Manager, err = ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  c.Scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        controllers.LeaderElectionID,
		LeaderElectionNamespace: c.LeaderElectionNamespace,
		// CountDenials outside Drain: it finds the *admission.Webhook that
		// Drain's handler would hide (webhooks suite, "the drain wraps every registered webhook").
		WebhookServer: webhooks.CountDenials(webhooks.Drain(webhookServer, m.draining)),
		Cache:         controllers.CacheOptions(),
		Controller:    c.Controller,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := policyindex.RegisterIndexes(ctx, m.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("registering field indexes: %w", err)
	}
	if !c.WithoutControllers {
		ctrlOpts := controllers.Options{Limits: o.Limits, MaxConcurrentReconciles: o.MaxConcurrentReconciles, ResyncPeriod: o.ResyncPeriod}
		if err := controllers.SetupWithManager(ctx, m, ctrlOpts); err != nil {
			return nil, fmt.Errorf("setting up the controllers: %w", err)
		}
	}
	ready := healthz.Ping
	if o.EnableWebhooks {
		// The serving certificate's expiry, for the chart's alert.
		if err := registerReplacing(&servingCert{dir: o.WebhookCertDir}); err != nil {
			return nil, fmt.Errorf("registering the certificate expiry metric: %w", err)
		}
		if err := webhooks.SetupWithManager(ctx, m, o.Limits); err != nil {
			return nil, fmt.Errorf("setting up the webhooks: %w", err)
		}
		webhooks.SetupInjectorWithManager(m, &o.Injector)
		serving := m.GetWebhookServer().StartedChecker()
		ready = serving
		if rotation.Enabled {
			if err := rotation.addTo(m, o.WebhookCertDir, certsReady); err != nil {
				return nil, err
			}
			ready = func(req *http.Request) error {
				select {
				case <-certsReady:
					return serving(req)
				default:
					return errors.New("waiting for the webhook serving certificate")
				}
			}
		}
	}
	if err := m.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := m.AddReadyzCheck("readyz", func(req *http.Request) error {
		if m.draining.On() {
			return errors.New("terminating")
		}
		return ready(req)
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// Start runs the manager until ctx ends and, while it serves webhooks, for
// the drain after that (drainThenStop).
func (m *Manager) Start(ctx context.Context) error {
	ctx, stop := drainThenStop(ctx, m.draining, m.opts)
	defer stop()
	return m.Manager.Start(ctx)
}

// Build names the binary's build; cmd/manager's is stamped by make image.
type Build struct{ Version, Revision string }

// controllerOptions are Run's options for every controller; the tests, which
// run the manager more than once in one process, skip the unique-name check.
var controllerOptions config.Controller

// Run parses args as the manager's flags, builds the manager and runs it
// until ctx ends.
func Run(ctx context.Context, args []string, b Build) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var o options.Manager
	o.AddFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	log.Info("starting retryguard manager", "version", b.Version, "revision", b.Revision)
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", o.Kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	m, err := New(ctx, cfg, Config{Manager: o, Controller: controllerOptions})
	if err != nil {
		return err
	}
	log.Info("starting manager", "maxLeafAttempts", o.Limits.MaxLeafAttempts, "maxRetryPercent", o.Limits.MaxRetryPercent,
		"certRotation", o.CertRotation.Enabled, "secureMetrics", o.MetricsSecure, "http2", o.EnableHTTP2)
	return m.Start(ctx)
}

// drainThenStop returns the context the manager runs under: it ends
// o.ShutdownDrain after ctx does (SIGTERM), once d has been on that long,
// so that a terminating replica's webhooks answer every review already on
// its way while the API server moves to another replica (webhooks.Drain).
// Without webhooks there is nothing to drain: it ends with ctx. A second
// signal still exits at once (ctrl.SetupSignalHandler).
func drainThenStop(ctx context.Context, d *webhooks.Draining, o options.Manager) (context.Context, context.CancelFunc) {
	if !o.EnableWebhooks || o.ShutdownDrain == 0 {
		return context.WithCancel(ctx)
	}
	stop, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-stop.Done():
			return
		}
		d.Start()
		ctrl.Log.WithName("setup").Info("terminating: admission keeps answering, closing each connection, until the drain ends",
			"drain", o.ShutdownDrain)
		t := time.NewTimer(o.ShutdownDrain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop.Done():
		}
		cancel()
	}()
	return stop, cancel
}

// startAfter holds a webhook server's start until ready closes, so that
// webhooks can be registered before the manager starts (as controller-runtime
// requires) while the certificate does not exist yet.
type startAfter struct {
	webhook.Server
	ready <-chan struct{}
}

func (s *startAfter) Start(ctx context.Context) error {
	select {
	case <-s.ready:
		return s.Server.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}

// registerReplacing registers c in controller-runtime's registry, replacing
// the collector of an earlier manager in this process (the tests build
// several).
func registerReplacing(c prometheus.Collector) error {
	err := metrics.Registry.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		metrics.Registry.Unregister(are.ExistingCollector)
		err = metrics.Registry.Register(c)
	}
	return err
}
