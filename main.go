// Command manager runs Retryguard's controllers and admission webhooks.
package main

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

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(policyv1alpha1.AddToScheme(scheme))
}

// version and revision are stamped by make image (-X main.version=…,
// -X main.revision=…) and logged at start, so a pod's log names its build.
var (
	version  = "dev"
	revision = "unknown"
)

// controllerOptions apply to every controller; tests that run the manager
// more than once in one process skip the unique-name check.
var controllerOptions config.Controller

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "manager failed")
		os.Exit(1)
	}
}

// run parses args, builds the manager and runs it until ctx ends.
func run(ctx context.Context, args []string) error {
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
	log.Info("starting retryguard manager", "version", version, "revision", revision)
	if err := o.Validate(); err != nil {
		return err
	}
	limits, rotation := o.Limits, certRotation{o.CertRotation}

	if o.Kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", o.Kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
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
	// SIGTERM starts the drain: admission keeps answering, each answer
	// closing its connection, and the manager stops o.ShutdownDrain later.
	var draining webhooks.Draining
	ctx, stop := drainThenStop(ctx, &draining, o)
	defer stop()
	// Refusals are counted by code in retryguard_admission_denied_total.
	var webhookServer webhook.Server = webhook.NewServer(webhooks.ServerOptions(o.WebhookPort, o.WebhookCertDir, o.WebhookClientCAName, tlsOpts))
	certsReady := make(chan struct{})
	if rotation.Enabled {
		// The server cannot start before its certificate exists: it starts
		// once the rotator has written and mounted it and injected its CA.
		webhookServer = &startAfter{Server: webhookServer, ready: certsReady}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: o.ProbeAddr,
		LeaderElection:         o.LeaderElect,
		LeaderElectionID:       controllers.LeaderElectionID,
		// CountDenials outside Drain: it finds the *admission.Webhook that
		// Drain's handler would hide (webhooks suite, "the drain wraps every registered webhook").
		WebhookServer: webhooks.CountDenials(webhooks.Drain(webhookServer, &draining)),
		Cache:         controllers.CacheOptions(),
		Controller:    controllerOptions,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := policyindex.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("registering field indexes: %w", err)
	}
	ctrlOpts := controllers.Options{Limits: limits, MaxConcurrentReconciles: o.MaxConcurrentReconciles, ResyncPeriod: o.ResyncPeriod}
	if err := controllers.SetupWithManager(ctx, mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	ready := healthz.Ping
	if o.EnableWebhooks {
		// The serving certificate's expiry, for the chart's alert.
		if err := registerReplacing(&servingCert{dir: o.WebhookCertDir}); err != nil {
			return fmt.Errorf("registering the certificate expiry metric: %w", err)
		}
		if err := webhooks.SetupWithManager(ctx, mgr, limits); err != nil {
			return fmt.Errorf("setting up the webhooks: %w", err)
		}
		webhooks.SetupInjectorWithManager(mgr, &o.Injector)
		serving := mgr.GetWebhookServer().StartedChecker()
		ready = serving
		if rotation.Enabled {
			if err := rotation.addTo(mgr, o.WebhookCertDir, certsReady); err != nil {
				return err
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
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if draining.On() {
			return errors.New("terminating")
		}
		return ready(req)
	}); err != nil {
		return err
	}
	log.Info("starting manager", "maxLeafAttempts", limits.MaxLeafAttempts, "maxRetryPercent", limits.MaxRetryPercent,
		"certRotation", rotation.Enabled, "secureMetrics", o.MetricsSecure, "http2", o.EnableHTTP2)
	return mgr.Start(ctx)
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
// the collector of an earlier run in this process (run is called once per
// manager, and the tests start several).
func registerReplacing(c prometheus.Collector) error {
	err := metrics.Registry.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		metrics.Registry.Unregister(are.ExistingCollector)
		err = metrics.Registry.Register(c)
	}
	return err
}
