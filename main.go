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
	corev1 "k8s.io/api/core/v1"
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

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/webhooks"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(policyv1alpha1.AddToScheme(scheme))
}

// Defaults of the manager's flags that the chart and config/ also name.
const (
	DefaultMetricsAddr    = ":8443"
	DefaultProbeAddr      = ":8081"
	DefaultWebhookPort    = 9443
	DefaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"
)

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
	var metricsAddr, metricsCertDir, probeAddr, certDir, clientCAName, kubeconfig string
	var leaderElect, enableWebhooks, secureMetrics, enableHTTP2 bool
	var concurrency, webhookPort int
	var injector webhooks.Injector
	var resync time.Duration
	var limits policygraph.Limits
	var rotation certRotation
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty.")
	fs.StringVar(&metricsAddr, "metrics-bind-address", DefaultMetricsAddr, "Address the metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS to callers the API server authenticates and authorizes (get on the /metrics non-resource URL); false serves plain HTTP to anyone.")
	fs.StringVar(&metricsCertDir, "metrics-cert-dir", "",
		"Directory with the tls.crt and tls.key the metrics endpoint serves, read again when they change (the chart passes --webhook-cert-dir, "+
			"so that a scraper verifies it with the webhook's CA); empty: a self-signed certificate.")
	fs.BoolVar(&enableHTTP2, "enable-http2", false,
		"Offer HTTP/2 on the metrics and webhook servers. Off by default: HTTP/2 Rapid Reset and Stream Cancellation (CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&probeAddr, "health-probe-bind-address", DefaultProbeAddr, "Address the health and readiness probes bind to.")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&certDir, "webhook-cert-dir", DefaultWebhookCertDir, "Directory with the webhook serving tls.crt and tls.key; reloaded when they change.")
	fs.IntVar(&webhookPort, "webhook-port", DefaultWebhookPort, "Port the admission webhooks listen on.")
	fs.StringVar(&clientCAName, "webhook-client-ca-name", "",
		"File in --webhook-cert-dir with the CA of the API server's webhook client certificate; when set, only callers presenting a certificate it signed are answered.")
	fs.BoolVar(&enableWebhooks, "enable-webhooks", true, "Serve the admission webhooks: the validating ones and the retryguard-proxy injector.")
	fs.StringVar(&injector.Image, "proxy-image", "",
		"The retryguard-proxy image the injector adds to pods annotated "+webhooks.InjectAnnotation+": \"true\"; when empty, such pods are refused (docs/proxy.md).")
	fs.Func("proxy-image-pull-policy", "The injected sidecar's imagePullPolicy: Always, IfNotPresent (the default) or Never.", func(s string) error {
		switch p := corev1.PullPolicy(s); p {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			injector.PullPolicy = p
			return nil
		}
		return fmt.Errorf("want Always, IfNotPresent or Never, got %q", s)
	})
	fs.IntVar(&concurrency, "max-concurrent-reconciles", 4, "RetryPolicy reconciles run at once.")
	fs.DurationVar(&resync, "resync-period", controllers.DefaultResyncPeriod,
		"How often every RetryPolicy is republished with nothing changed, so drift is repaired even without an event.")
	rotation.bindFlags(fs)
	webhooks.BindFlags(fs, &limits)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	log.Info("starting retryguard manager", "version", version, "revision", revision)
	if resync < 0 {
		return fmt.Errorf("--resync-period %v: must not be negative", resync)
	}
	if err := rotation.validate(enableWebhooks); err != nil {
		return err
	}

	if kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: tlsOpts}
	if metricsCertDir != "" {
		cert := &servingCert{dir: metricsCertDir}
		metricsOpts.TLSOpts = append(slices.Clip(tlsOpts), func(c *tls.Config) { c.GetCertificate = cert.getCertificate })
	}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	// Refusals are counted by code in retryguard_admission_denied_total.
	var webhookServer webhook.Server = webhook.NewServer(webhooks.ServerOptions(webhookPort, certDir, clientCAName, tlsOpts))
	certsReady := make(chan struct{})
	if rotation.Enabled {
		// The server cannot start before its certificate exists: it starts
		// once the rotator has written and mounted it and injected its CA.
		webhookServer = &startAfter{Server: webhookServer, ready: certsReady}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       controllers.LeaderElectionID,
		WebhookServer:          webhooks.CountDenials(webhookServer),
		Cache:                  controllers.CacheOptions(),
		Controller:             controllerOptions,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := policyindex.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("registering field indexes: %w", err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{Limits: limits, MaxConcurrentReconciles: concurrency, ResyncPeriod: resync}); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	ready := healthz.Ping
	if enableWebhooks {
		// The serving certificate's expiry, for the chart's alert.
		if err := registerReplacing(&servingCert{dir: certDir}); err != nil {
			return fmt.Errorf("registering the certificate expiry metric: %w", err)
		}
		if err := webhooks.SetupWithManager(ctx, mgr, limits); err != nil {
			return fmt.Errorf("setting up the webhooks: %w", err)
		}
		webhooks.SetupInjectorWithManager(mgr, &injector)
		serving := mgr.GetWebhookServer().StartedChecker()
		ready = serving
		if rotation.Enabled {
			if err := rotation.addTo(mgr, certDir, certsReady); err != nil {
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
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return err
	}
	log.Info("starting manager", "maxLeafAttempts", limits.MaxLeafAttempts, "maxRetryPercent", limits.MaxRetryPercent,
		"certRotation", rotation.Enabled, "secureMetrics", secureMetrics, "http2", enableHTTP2)
	return mgr.Start(ctx)
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
