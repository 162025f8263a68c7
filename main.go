// Command manager runs Retryguard's controllers and admission webhooks.
package main

import (
	"flag"
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
	var metricsAddr, probeAddr, certDir string
	var leaderElect, enableWebhooks bool
	var concurrency int
	var limits policygraph.Limits
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&certDir, "webhook-cert-dir", "", "Directory with the webhook serving tls.crt and tls.key (default: controller-runtime's).")
	flag.BoolVar(&enableWebhooks, "enable-webhooks", true, "Serve the validating admission webhooks.")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 4, "RetryPolicy reconciles run at once.")
	webhooks.BindFlags(flag.CommandLine, &limits)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "retryguard-manager.policy.retryguard.io",
		WebhookServer:          webhook.NewServer(webhook.Options{CertDir: certDir}),
		Cache:                  controllers.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := policygraph.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		log.Error(err, "unable to register field indexes")
		os.Exit(1)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{Limits: limits, MaxConcurrentReconciles: concurrency}); err != nil {
		log.Error(err, "unable to set up controllers")
		os.Exit(1)
	}
	if enableWebhooks {
		if err := webhooks.SetupWithManager(ctx, mgr, limits); err != nil {
			log.Error(err, "unable to set up webhooks")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to add health check")
		os.Exit(1)
	}
	ready := healthz.Ping
	if enableWebhooks {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		log.Error(err, "unable to add readiness check")
		os.Exit(1)
	}
	log.Info("starting manager", "maxLeafAttempts", limits.MaxLeafAttempts, "maxRetryPercent", limits.MaxRetryPercent)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager exited")
		os.Exit(1)
	}
}
