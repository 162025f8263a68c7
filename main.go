// Command manager runs Retryguard's controllers and admission webhooks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retryguard/retryguard/api/policygraph"
	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/webhooks"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(policyv1alpha1.AddToScheme(scheme))
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "manager failed")
		os.Exit(1)
	}
}

// run parses args, builds the manager and runs it until ctx ends.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var metricsAddr, probeAddr, certDir, kubeconfig string
	var leaderElect, enableWebhooks bool
	var concurrency int
	var limits policygraph.Limits
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty.")
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&certDir, "webhook-cert-dir", "", "Directory with the webhook serving tls.crt and tls.key (default: controller-runtime's).")
	fs.BoolVar(&enableWebhooks, "enable-webhooks", true, "Serve the validating admission webhooks.")
	fs.IntVar(&concurrency, "max-concurrent-reconciles", 4, "RetryPolicy reconciles run at once.")
	webhooks.BindFlags(fs, &limits)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "retryguard-manager.policy.retryguard.io",
		WebhookServer:          webhook.NewServer(webhook.Options{CertDir: certDir}),
		Cache:                  controllers.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := policygraph.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("registering field indexes: %w", err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{Limits: limits, MaxConcurrentReconciles: concurrency}); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	ready := healthz.Ping
	if enableWebhooks {
		if err := webhooks.SetupWithManager(ctx, mgr, limits); err != nil {
			return fmt.Errorf("setting up the webhooks: %w", err)
		}
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return err
	}
	log.Info("starting manager", "maxLeafAttempts", limits.MaxLeafAttempts, "maxRetryPercent", limits.MaxRetryPercent)
	return mgr.Start(ctx)
}
