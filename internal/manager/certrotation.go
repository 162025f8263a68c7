package manager

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryguard/retryguard/internal/options"
)

// certRotation is the manager's own serving certificate, for clusters
// without cert-manager: github.com/open-policy-agent/cert-controller (as
// Gatekeeper uses it) keeps a CA and a serving certificate in a Secret that
// the pod mounts, renews them ahead of expiry, and injects the CA into the
// ValidatingWebhookConfiguration. Its flags and their validation are in
// internal/options.
type certRotation struct{ options.CertRotation }

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
