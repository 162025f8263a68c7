// Package check answers whether an installation of Retryguard works, as
// `linkerd check` and `cmctl check api` do: each Check reads the cluster
// and says in one line what it found. They run in order and go on after a
// failure, so that one run lists every problem.
package check

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/controllers"
)

// The checks, in the order they run.
const (
	NameCRDs        = "crds"
	NameWebhook     = "webhook-configuration"
	NameAnswers     = "webhook-answers"
	NameCertificate = "webhook-certificate"
	NamePolicy      = "admission-policy"
	NameLeader      = "leader-lease"
)

// Names lists every check in order.
var Names = []string{NameCRDs, NameWebhook, NameAnswers, NameCertificate, NamePolicy, NameLeader}

// DefaultMinValidity is how long the webhook's CA must stay valid for the
// certificate check to pass. cert-manager renews a 90-day certificate 30
// days before its end, and the manager's own rotation renews far earlier,
// so less than 3 days left means renewal is failing.
const DefaultMinValidity = 72 * time.Hour

// DefaultManagerNamespace is where the chart and config/default install the
// manager; the webhook's Service says so when it has one.
const DefaultManagerNamespace = "retryguard-system"

// Options configure a run.
type Options struct {
	// Namespace is where the webhook probe is sent (a dry-run create; nothing is stored).
	Namespace string
	// ManagerNamespace holds the leader Lease; empty means the webhook
	// Service's namespace, else DefaultManagerNamespace.
	ManagerNamespace string
	// MinValidity is how long the webhook's CA must stay valid.
	MinValidity time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Hints say, for each check that fails, what to look at and run; each
// points into docs/kubectl-plugin.md's check section (as linkerd check links
// one per check).
var Hints = map[string]string{
	NameCRDs: "install the CRDs (helm install or upgrade the chart; kubectl apply -k config/crd); " +
		checkDoc,
	NameWebhook: "install the chart, or kubectl apply -k config/default; the webhooks are named " +
		strings.Join(webhookNames, " and ") + "; " + checkDoc,
	NameAnswers: "the manager's pods and its webhook Service: kubectl -n <manager namespace> get pods,endpoints; " +
		"a refusal naming ERR_ADMISSION_BUSY means the webhook is overloaded; " + checkDoc,
	NameCertificate: "renew the webhook's certificate (cert-manager, or the manager's own rotation restarts it); " + checkDoc,
	NamePolicy:      "enable the chart's validatingAdmissionPolicy (the default), or kubectl apply -k config/vap; " + checkDoc,
	NameLeader:      "no manager leads: kubectl -n <manager namespace> get pods,lease; its logs say why; " + checkDoc,
}

// checkDoc is the check section of the plugin's docs.
const checkDoc = "docs/kubectl-plugin.md#check-is-the-installation-working"

// ErrUnreachable is matched by a run that stopped because the API server
// could not be reached (no answer, refused, TLS): no check can say anything
// of the installation then.
var ErrUnreachable = errors.New("the cluster's API server cannot be reached")

// The names the installation's objects have under any release name or
// prefix: the webhooks' own names, the CRDs', and the policy's suffix.
var (
	crdNames     = []string{"retrypolicies." + v1.GroupVersion.Group, "retrybudgets." + v1.GroupVersion.Group}
	webhookNames = []string{"vretrypolicy-v1alpha1." + v1.GroupVersion.Group, "vretrybudget-v1alpha1." + v1.GroupVersion.Group}
)

const (
	policySuffix = "published-configmaps"
	probeName    = "retryguard-check-probe"
)

var errNoWebhooks = errors.New("no ValidatingWebhookConfiguration holds Retryguard's webhooks")

// run is the state one run carries from check to check.
type run struct {
	c       client.Client
	opts    Options
	webhook *admissionregistrationv1.ValidatingWebhookConfiguration
}

// Run runs every check in order and returns their results.
func Run(ctx context.Context, c client.Client, opts Options) output.CheckResult {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MinValidity == 0 {
		opts.MinValidity = DefaultMinValidity
	}
	r := &run{c: c, opts: opts}
	res := output.CheckResult{TypeMeta: output.Meta(output.KindCheckResult), Passed: true}
	for _, step := range []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{NameCRDs, r.crds}, {NameWebhook, r.webhookConfiguration}, {NameAnswers, r.answers},
		{NameCertificate, r.certificate}, {NamePolicy, r.admissionPolicy}, {NameLeader, r.leader},
	} {
		msg, err := step.fn(ctx)
		if unreachable(err) {
			// Every later check would fail for the same reason and name a
			// missing object that may well be there.
			res.Passed, res.Unreachable = false, fmt.Sprintf("%v: %v", ErrUnreachable, err)
			return res
		}
		ch := output.Check{Name: step.name, Passed: err == nil, Message: msg}
		if err != nil {
			ch.Message, ch.Hint, res.Passed = err.Error(), Hints[step.name], false
		}
		res.Checks = append(res.Checks, ch)
	}
	return res
}

// unreachable reports whether err is no answer from the API server: not an
// API status (a refusal, a 404, a 403 is the server's answer), nor the
// check's own finding.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne)
}

func (r *run) crds(ctx context.Context) (string, error) {
	for _, name := range crdNames {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return "", fmt.Errorf("CRD %s: %w", name, err)
		}
		for _, t := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.Established, apiextensionsv1.NamesAccepted} {
			if !crdCondition(&crd, t) {
				return "", fmt.Errorf("CRD %s is not %s", name, t)
			}
		}
		if !slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
			return v.Name == v1.GroupVersion.Version && v.Served
		}) {
			return "", fmt.Errorf("CRD %s does not serve %s", name, v1.GroupVersion.Version)
		}
	}
	return fmt.Sprintf("CRDs %s established, serving %s", strings.Join(crdNames, " and "), v1.GroupVersion.Version), nil
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func (r *run) webhookConfiguration(ctx context.Context) (string, error) {
	var list admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := r.c.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing ValidatingWebhookConfigurations: %w", err)
	}
	for i := range list.Items {
		w := &list.Items[i]
		var have []string
		for _, h := range w.Webhooks {
			have = append(have, h.Name)
		}
		if !slices.ContainsFunc(webhookNames, func(n string) bool { return slices.Contains(have, n) }) {
			continue
		}
		r.webhook = w
		for _, n := range webhookNames {
			if !slices.Contains(have, n) {
				return "", fmt.Errorf("ValidatingWebhookConfiguration %s lacks the webhook %s", w.Name, n)
			}
		}
		for _, h := range w.Webhooks {
			if slices.Contains(webhookNames, h.Name) && (h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail) {
				return "", fmt.Errorf("ValidatingWebhookConfiguration %s: webhook %s does not fail closed (failurePolicy Fail)", w.Name, h.Name)
			}
		}
		return fmt.Sprintf("ValidatingWebhookConfiguration %s holds %s, failing closed, calling %s", w.Name,
			strings.Join(webhookNames, " and "), endpoint(w.Webhooks[0].ClientConfig)), nil
	}
	return "", errNoWebhooks
}

func endpoint(cc admissionregistrationv1.WebhookClientConfig) string {
	if s := cc.Service; s != nil {
		return fmt.Sprintf("Service %s/%s", s.Namespace, s.Name)
	}
	return ptr.Deref(cc.URL, "nothing")
}

// answers sends the webhook a RetryPolicy that its schema admits and that
// only the webhook refuses: its parentRef names the policy itself, a cycle
// (ERR_LAYER_CYCLE) whatever the cluster holds and whatever the platform
// limits. It is a dry run, so nothing is stored; the refusal proves that the
// API server reached the webhook over TLS, verifying the served certificate
// against the configuration's caBundle.
func (r *run) answers(ctx context.Context) (string, error) {
	if r.webhook == nil {
		return "", errNoWebhooks
	}
	p := Probe(r.opts.Namespace)
	err := r.c.Create(ctx, p, client.DryRunAll)
	switch {
	case err == nil:
		return "", fmt.Errorf("a dry-run RetryPolicy %s/%s that is its own parent was admitted: the webhook did not judge it", p.Namespace, p.Name)
	case apierrors.IsInvalid(err) && strings.Contains(err.Error(), string(codes.LayerCycle)):
		return fmt.Sprintf("the webhook refused a dry-run RetryPolicy that is its own parent (%s): it answers", codes.LayerCycle), nil
	}
	return "", fmt.Errorf("a dry-run create in namespace %s did not reach the webhook: %w", p.Namespace, err)
}

// Probe is the RetryPolicy answers sends: valid alone (a single attempt,
// which needs no budget), its own parent.
func Probe(namespace string) *v1.RetryPolicy {
	return &v1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: probeName},
		Spec: v1.RetryPolicySpec{
			Target:      v1.RetryTarget{Service: "retryguard-check", Operation: ptr.To("GET /retryguard-check")},
			Layer:       v1.RetryLayer{Name: "check", ParentRef: &v1.ParentReference{Name: probeName}},
			MaxAttempts: 1,
			Backoff:     &v1.Backoff{Jitter: ptr.To(v1.JitterFull)},
			Deadline:    v1.DurationOf(time.Second),
		},
	}
}

// certificate checks the caBundle the API server verifies the webhook's
// serving certificate with: it parses, and it stays valid for at least
// MinValidity. That the served certificate chains to it is what answers
// proved.
func (r *run) certificate(context.Context) (string, error) {
	if r.webhook == nil {
		return "", errNoWebhooks
	}
	now := r.opts.Now()
	var soonest *x509.Certificate
	for _, h := range r.webhook.Webhooks {
		if !slices.Contains(webhookNames, h.Name) {
			continue
		}
		certs, err := parsePEM(h.ClientConfig.CABundle)
		if err != nil {
			return "", fmt.Errorf("webhook %s: caBundle: %w", h.Name, err)
		}
		for _, c := range certs {
			if soonest == nil || c.NotAfter.Before(soonest.NotAfter) {
				soonest = c
			}
			if now.Before(c.NotBefore) {
				return "", fmt.Errorf("webhook %s: caBundle certificate %q is not valid before %s", h.Name, c.Subject, c.NotBefore.UTC().Format(time.RFC3339))
			}
		}
	}
	left := soonest.NotAfter.Sub(now)
	if left < r.opts.MinValidity {
		return "", fmt.Errorf("the webhook's CA %q expires at %s, in %s, under the %s required: renew it",
			soonest.Subject, soonest.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Minute), r.opts.MinValidity)
	}
	return fmt.Sprintf("the webhook's CA %q is valid until %s (%s left)", soonest.Subject,
		soonest.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Hour)), nil
}

func parsePEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("empty or holds no PEM certificate (the CA was never injected)")
	}
	return certs, nil
}

func (r *run) admissionPolicy(ctx context.Context) (string, error) {
	var policies admissionregistrationv1.ValidatingAdmissionPolicyList
	if err := r.c.List(ctx, &policies); err != nil {
		return "", fmt.Errorf("listing ValidatingAdmissionPolicies: %w", err)
	}
	i := slices.IndexFunc(policies.Items, func(p admissionregistrationv1.ValidatingAdmissionPolicy) bool {
		return strings.HasSuffix(p.Name, policySuffix)
	})
	if i < 0 {
		return "", fmt.Errorf("no ValidatingAdmissionPolicy *%s: the published ConfigMaps are not reserved for the operator", policySuffix)
	}
	name := policies.Items[i].Name
	var bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if err := r.c.List(ctx, &bindings); err != nil {
		return "", fmt.Errorf("listing ValidatingAdmissionPolicyBindings: %w", err)
	}
	for _, b := range bindings.Items {
		if b.Spec.PolicyName == name && slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
			return fmt.Sprintf("ValidatingAdmissionPolicy %s is bound by %s with Deny", name, b.Name), nil
		}
	}
	return "", fmt.Errorf("ValidatingAdmissionPolicy %s has no binding that denies: it is not enforced", name)
}

func (r *run) leader(ctx context.Context) (string, error) {
	ns := r.opts.ManagerNamespace
	if ns == "" && r.webhook != nil && len(r.webhook.Webhooks) > 0 && r.webhook.Webhooks[0].ClientConfig.Service != nil {
		ns = r.webhook.Webhooks[0].ClientConfig.Service.Namespace
	}
	if ns == "" {
		ns = DefaultManagerNamespace
	}
	var lease coordinationv1.Lease
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.LeaderElectionID}, &lease); err != nil {
		return "", fmt.Errorf("Lease %s/%s: %w", ns, controllers.LeaderElectionID, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" {
		return "", fmt.Errorf("Lease %s/%s is held by nobody: no manager leads, so nothing is published", ns, lease.Name)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return "", fmt.Errorf("Lease %s/%s held by %s states no renewTime or leaseDurationSeconds", ns, lease.Name, holder)
	}
	age := r.opts.Now().Sub(lease.Spec.RenewTime.Time)
	duration := time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	if age > duration {
		return "", fmt.Errorf("Lease %s/%s held by %s was last renewed %s ago, over its %s duration: the leader is gone",
			ns, lease.Name, holder, age.Round(time.Second), duration)
	}
	return fmt.Sprintf("Lease %s/%s held by %s, renewed %s ago (duration %s)", ns, lease.Name, holder, age.Round(time.Second), duration), nil
}
