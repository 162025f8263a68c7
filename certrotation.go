package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
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
	// podNamespaceEnv is set from the downward API in the Deployment.
	podNamespaceEnv = "POD_NAMESPACE"
)

// certRotation configures the manager's own serving certificate, for
// clusters without cert-manager: github.com/open-policy-agent/cert-controller
// (as Gatekeeper uses it) keeps a CA and a serving certificate in a Secret
// that the pod mounts, renews them ahead of expiry, and injects the CA into
// the ValidatingWebhookConfiguration.
type certRotation struct {
	Enabled bool
	// Namespace holds the Secret and the webhook Service.
	Namespace            string
	Secret               string
	Service              string
	WebhookConfiguration string
	// InjectorConfiguration is the retryguard-proxy injector's
	// MutatingWebhookConfiguration ("" leaves it out).
	InjectorConfiguration string
	// ExtraDNSNames are further names the serving certificate is valid for.
	ExtraDNSNames string
}

func (r *certRotation) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&r.Enabled, "cert-rotation", false,
		"Issue and rotate the webhook serving certificate in-process and inject its CA into the webhook configuration (for clusters without cert-manager).")
	fs.StringVar(&r.Namespace, "namespace", os.Getenv(podNamespaceEnv), "Namespace of the manager, its certificate Secret and webhook Service (default $"+podNamespaceEnv+").")
	fs.StringVar(&r.Secret, "cert-secret", DefaultCertSecret, "Secret, in --namespace, that holds the rotated CA and serving certificate and is mounted at --webhook-cert-dir.")
	fs.StringVar(&r.Service, "webhook-service", DefaultWebhookService, "Service in front of the webhooks; the certificate is issued for <service>.<namespace>.svc.")
	fs.StringVar(&r.WebhookConfiguration, "webhook-configuration", DefaultWebhookConfiguration, "ValidatingWebhookConfiguration whose caBundle the rotator fills in.")
	fs.StringVar(&r.InjectorConfiguration, "proxy-injector-configuration", DefaultInjectorConfiguration,
		"MutatingWebhookConfiguration of the retryguard-proxy injector whose caBundle the rotator fills in; empty leaves it out.")
	fs.StringVar(&r.ExtraDNSNames, "webhook-cert-dns-names", "", "Comma-separated further DNS names for the serving certificate.")
}

func (r *certRotation) validate(webhooksEnabled bool) error {
	if !r.Enabled {
		return nil
	}
	var errs []error
	if !webhooksEnabled {
		errs = append(errs, errors.New("--cert-rotation needs --enable-webhooks"))
	}
	for flagName, v := range map[string]string{"namespace": r.Namespace, "cert-secret": r.Secret,
		"webhook-service": r.Service, "webhook-configuration": r.WebhookConfiguration} {
		if v == "" {
			errs = append(errs, fmt.Errorf("--cert-rotation needs --%s", flagName))
		}
	}
	return errors.Join(errs...)
}

// addTo registers the rotator with mgr. It closes ready once the
// certificate is in certDir and its CA is in the webhook configuration.
func (r *certRotation) addTo(mgr ctrl.Manager, certDir string, ready chan struct{}) error {
	service := fmt.Sprintf("%s.%s.svc", r.Service, r.Namespace)
	extra := []string{service + ".cluster.local"}
	for _, n := range strings.Split(r.ExtraDNSNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			extra = append(extra, n)
		}
	}
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: r.Namespace, Name: r.Secret},
		CertDir:        certDir,
		CAName:         "retryguard-ca",
		CAOrganization: "retryguard",
		DNSName:        service,
		ExtraDNSNames:  extra,
		IsReady:        ready,
		Webhooks:       r.webhooks(),
		FieldOwner:     "retryguard-cert-rotator",
		// Every replica serves webhooks, so every replica keeps the
		// certificate current, not only the leader.
		RequireLeaderElection: false,
		EnableReadinessCheck:  true,
	})
	if err != nil {
		return fmt.Errorf("setting up certificate rotation: %w", err)
	}
	return nil
}

// webhooks are the configurations the rotator injects its CA into.
func (r *certRotation) webhooks() []rotator.WebhookInfo {
	hooks := []rotator.WebhookInfo{{Name: r.WebhookConfiguration, Type: rotator.Validating}}
	if r.InjectorConfiguration != "" {
		hooks = append(hooks, rotator.WebhookInfo{Name: r.InjectorConfiguration, Type: rotator.Mutating})
	}
	return hooks
}
