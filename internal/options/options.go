// Package options holds the manager's flags: their defaults as constants (the
// chart and config/ name the same values), the one struct they fill, and the
// one function that validates it, as cert-manager keeps its controller's
// options. The platform-limit flags are shared with kubectl retryguard, which
// judges a tree with the manager's own flag names and defaults.
package options

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/webhooks"
)

// Defaults of the manager's flags that the chart and config/ also name.
const (
	DefaultMetricsAddr    = ":8443"
	DefaultProbeAddr      = ":8081"
	DefaultWebhookPort    = 9443
	DefaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"
)

// Defaults of the certificate rotation flags; the chart and
// config/components/self-signed-certs pass the names they render.
const (
	DefaultCertSecret           = "retryguard-webhook-cert"
	DefaultWebhookService       = "retryguard-webhook-service"
	DefaultWebhookConfiguration = "retryguard-validating-webhook-configuration"
	// DefaultInjectorConfiguration is config/default's name of the
	// retryguard-proxy injector's MutatingWebhookConfiguration.
	DefaultInjectorConfiguration = "retryguard-proxy-injector"
	// PodNamespaceEnv is set from the downward API in the Deployment; it is
	// --namespace's default.
	PodNamespaceEnv = "POD_NAMESPACE"
)

// Manager is what the manager's flags configure.
type Manager struct {
	// Kubeconfig is a kubeconfig path; in-cluster or $KUBECONFIG when empty.
	Kubeconfig string
	// MetricsAddr and ProbeAddr are the metrics and probe bind addresses.
	MetricsAddr, ProbeAddr string
	// MetricsSecure serves metrics over HTTPS to authorized callers only.
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key; empty:
	// a self-signed certificate.
	MetricsCertDir string
	// EnableHTTP2 offers HTTP/2 on the metrics and webhook servers.
	EnableHTTP2 bool
	LeaderElect bool
	// EnableWebhooks serves the validating admission webhooks.
	EnableWebhooks bool
	WebhookCertDir string
	WebhookPort    int
	// WebhookClientCAName is a file in WebhookCertDir: when set, only callers
	// presenting a certificate it signed are answered.
	WebhookClientCAName string
	// Injector is the retryguard-proxy sidecar the injecting webhook adds.
	Injector                webhooks.Injector
	MaxConcurrentReconciles int
	ResyncPeriod            time.Duration
	// ShutdownDrain is how long a terminating manager keeps serving
	// admission, every answer closing its connection, before it stops.
	ShutdownDrain time.Duration
	// Limits are the platform limits the webhooks and controllers apply.
	Limits       policygraph.Limits
	CertRotation CertRotation
}

// CertRotation configures the manager's own serving certificate, for
// clusters without cert-manager.
type CertRotation struct {
	Enabled bool
	// Namespace holds the Secret and the webhook Service.
	Namespace            string
	Secret               string
	Service              string
	WebhookConfiguration string
	// InjectorConfiguration is the retryguard-proxy injector's
	// MutatingWebhookConfiguration ("" leaves it out).
	InjectorConfiguration string
	// ExtraDNSNames are further comma-separated names the serving
	// certificate is valid for.
	ExtraDNSNames string
}

// Defaults returns the options every flag's default gives, for a manager
// built without a command line (internal/testenv).
func Defaults() Manager {
	var o Manager
	o.AddFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return o
}

// AddFlags registers every manager flag on fs, each starting from its
// default.
func (o *Manager) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty.")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", DefaultMetricsAddr, "Address the metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers the API server authenticates and authorizes (get on the /metrics non-resource URL); "+
			"false serves plain HTTP to anyone.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "",
		"Directory with the tls.crt and tls.key the metrics endpoint serves, read again when they change (the chart passes --webhook-cert-dir, "+
			"so that a scraper verifies it with the webhook's CA); empty: a self-signed certificate.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", false,
		"Offer HTTP/2 on the metrics and webhook servers. Off by default: HTTP/2 Rapid Reset and Stream Cancellation (CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", DefaultProbeAddr, "Address the health and readiness probes bind to.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", DefaultWebhookCertDir,
		"Directory with the webhook serving tls.crt and tls.key; reloaded when they change.")
	fs.IntVar(&o.WebhookPort, "webhook-port", DefaultWebhookPort, "Port the admission webhooks listen on.")
	fs.StringVar(&o.WebhookClientCAName, "webhook-client-ca-name", "",
		"File in --webhook-cert-dir with the CA of the API server's webhook client certificate; when set, only callers presenting a certificate it signed "+
			"are answered.")
	fs.BoolVar(&o.EnableWebhooks, "enable-webhooks", true, "Serve the admission webhooks: the validating ones and the retryguard-proxy injector.")
	fs.StringVar(&o.Injector.Image, "proxy-image", "",
		"The retryguard-proxy image the injector adds to pods annotated "+webhooks.InjectAnnotation+": \"true\"; when empty, such pods are refused (docs/proxy.md).")
	fs.Func("proxy-image-pull-policy", "The injected sidecar's imagePullPolicy: Always, IfNotPresent (the default) or Never.", func(s string) error {
		switch p := corev1.PullPolicy(s); p {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			o.Injector.PullPolicy = p
			return nil
		}
		return fmt.Errorf("want Always, IfNotPresent or Never, got %q", s)
	})
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "RetryPolicy reconciles run at once.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", controllers.DefaultResyncPeriod,
		"How often every RetryPolicy is republished with nothing changed, so drift is repaired even without an event.")
	fs.DurationVar(&o.ShutdownDrain, "shutdown-drain", webhooks.DefaultShutdownDrain,
		"After SIGTERM, how long the webhooks keep answering, each answer closing its connection so that the API server moves to another replica, "+
			"before the manager stops; keep it below the pod's terminationGracePeriodSeconds.")
	o.CertRotation.addFlags(fs)
	BindPlatformLimits(fs, &o.Limits)
}

func (r *CertRotation) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&r.Enabled, "cert-rotation", false,
		"Issue and rotate the webhook serving certificate in-process and inject its CA into the webhook configuration (for clusters without cert-manager).")
	fs.StringVar(&r.Namespace, "namespace", os.Getenv(PodNamespaceEnv),
		"Namespace of the manager, its certificate Secret and webhook Service (default $"+PodNamespaceEnv+").")
	fs.StringVar(&r.Secret, "cert-secret", DefaultCertSecret,
		"Secret, in --namespace, that holds the rotated CA and serving certificate and is mounted at --webhook-cert-dir.")
	fs.StringVar(&r.Service, "webhook-service", DefaultWebhookService,
		"Service in front of the webhooks; the certificate is issued for <service>.<namespace>.svc.")
	fs.StringVar(&r.WebhookConfiguration, "webhook-configuration", DefaultWebhookConfiguration,
		"ValidatingWebhookConfiguration whose caBundle the rotator fills in.")
	fs.StringVar(&r.InjectorConfiguration, "proxy-injector-configuration", DefaultInjectorConfiguration,
		"MutatingWebhookConfiguration of the retryguard-proxy injector whose caBundle the rotator fills in; empty leaves it out.")
	fs.StringVar(&r.ExtraDNSNames, "webhook-cert-dns-names", "", "Comma-separated further DNS names for the serving certificate.")
}

// BindPlatformLimits registers the platform limits as flags, starting from
// the defaults. A value out of range is refused as the flag is parsed, with
// the message Validate gives.
func BindPlatformLimits(fs *flag.FlagSet, platform *policygraph.Limits) {
	*platform = policygraph.DefaultLimits()
	fs.Func("max-leaf-attempts", fmt.Sprintf(
		"Largest product of maxAttempts along a parentRef chain, from %d to %d (default %d: only one layer may retry).",
		1, limits.MaxPlatformLeafAttempts, policygraph.DefaultMaxLeafAttempts), func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			err = validateLeafAttempts(v)
		}
		platform.MaxLeafAttempts = v
		return wholeNumber(s, err, limits.MaxPlatformLeafAttempts)
	})
	fs.Func("max-retry-percent", fmt.Sprintf(
		"Largest RetryBudget retryPercent the platform allows, from %d to %d (default %d).",
		1, limits.MaxBudgetRetryPercent, policygraph.DefaultMaxRetryPercent), func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		if err == nil {
			err = validateRetryPercent(int32(v))
		}
		platform.MaxRetryPercent = int32(v)
		return wholeNumber(s, err, int64(limits.MaxBudgetRetryPercent))
	})
}

// wholeNumber is a platform-limit flag's parse error: the same words for a
// value that is no number and one out of range.
func wholeNumber(s string, err error, hi int64) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("want a whole number from %d to %d, got %q", 1, hi, s)
}

func validateLeafAttempts(v int64) error {
	if v < 1 || v > limits.MaxPlatformLeafAttempts {
		return fmt.Errorf("--max-leaf-attempts %d: want a whole number from %d to %d", v, 1, limits.MaxPlatformLeafAttempts)
	}
	return nil
}

func validateRetryPercent(v int32) error {
	if v < 1 || v > limits.MaxBudgetRetryPercent {
		return fmt.Errorf("--max-retry-percent %d: want a whole number from %d to %d", v, 1, limits.MaxBudgetRetryPercent)
	}
	return nil
}

// Validate returns every problem of o at once: the platform limits' ranges,
// a negative resync period or shutdown drain, and certificate rotation without the webhooks or
// without the names it needs.
func (o *Manager) Validate() error {
	var errs []error
	errs = append(errs, validateLeafAttempts(o.Limits.MaxLeafAttempts), validateRetryPercent(o.Limits.MaxRetryPercent))
	if o.ResyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--resync-period %v: must not be negative", o.ResyncPeriod))
	}
	if o.ShutdownDrain < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-drain %v: must not be negative", o.ShutdownDrain))
	}
	if r := o.CertRotation; r.Enabled {
		if !o.EnableWebhooks {
			errs = append(errs, errors.New("--cert-rotation needs --enable-webhooks"))
		}
		for _, f := range []struct{ flag, value string }{
			{"namespace", r.Namespace}, {"cert-secret", r.Secret}, {"webhook-service", r.Service}, {"webhook-configuration", r.WebhookConfiguration},
		} {
			if f.value == "" {
				errs = append(errs, fmt.Errorf("--cert-rotation needs --%s", f.flag))
			}
		}
	}
	return errors.Join(errs...)
}
