package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/check"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
)

// check against a real API server with the manager's webhooks: what is
// missing fails, each on its own line, and once the admission policy is
// bound and a manager leads, every check passes. Then the lease goes stale,
// the CA nears its end, and the webhook stops answering, each failing its
// own check.
func TestCheckAgainstARealAPIServer(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	env, cfg := testenv.StartEnvironment(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	managerCtx, stopManager := context.WithCancel(ctx)
	if _, _, err := testenv.StartManaged(managerCtx, env, cfg, policygraph.DefaultLimits(), testenv.Features{Webhooks: true}); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	orig := connect
	connect = func(genericclioptions.RESTClientGetter) (client.Client, string, error) { return k8s, "default", nil }
	t.Cleanup(func() { connect = orig })

	code, out, errOut := runCLI(t, "", "check")
	if code != exitRefused {
		t.Fatalf("without the admission policy and a leader: exit %d, want %d\n%s%s", code, exitRefused, out, errOut)
	}
	assertContains(t, out,
		"ok   crds ", "retrypolicies.policy.retryguard.io and retrybudgets.policy.retryguard.io established",
		"ok   webhook-configuration  ValidatingWebhookConfiguration validating-webhook-configuration holds",
		"ok   webhook-answers        the webhook refused a dry-run RetryPolicy that is its own parent (ERR_LAYER_CYCLE)",
		"ok   webhook-certificate    the webhook's CA",
		"FAIL admission-policy       no ValidatingAdmissionPolicy *published-configmaps",
		"FAIL leader-lease           Lease retryguard-system/"+controllers.LeaderElectionID)
	if n := strings.Count(out, "\n"); n != len(check.Names) {
		t.Errorf("%d lines, want one per check (%d):\n%s", n, len(check.Names), out)
	}

	// The dry run stored nothing.
	var probe = check.Probe("default")
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(probe), probe); err == nil {
		t.Error("the webhook probe was stored")
	}

	// config/vap as config/default installs it (namePrefix retryguard-),
	// and a manager elected leader through the Lease internal/manager names.
	installAdmissionPolicy(t, ctx, k8s)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: check.DefaultManagerNamespace}}); err != nil {
		t.Fatal(err)
	}
	leaderCtx, stopLeader := context.WithCancel(ctx)
	leader, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: kube.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", LeaderElection: true, LeaderElectionID: controllers.LeaderElectionID,
		LeaderElectionNamespace: check.DefaultManagerNamespace})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = leader.Start(leaderCtx) }()
	select {
	case <-leader.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("the manager was not elected within 30s")
	}

	code, out, errOut = runCLI(t, "", "check", "-o", "json")
	if code != exitOK {
		t.Fatalf("installed: exit %d\n%s%s", code, out, errOut)
	}
	res := decodeStrict[output.CheckResult](t, out)
	if res.APIVersion != output.APIVersion || res.Kind != output.KindCheckResult || !res.Passed || len(res.Checks) != len(check.Names) {
		t.Errorf("check -o json: %+v", res)
	}
	stopLeader()

	failing := func(opts check.Options, name, want string) {
		t.Helper()
		opts.Namespace = "default"
		for _, c := range check.Run(ctx, k8s, opts).Checks {
			if c.Name == name && (c.Passed || !strings.Contains(c.Message, want)) {
				t.Errorf("%s: passed %v, %q; want a failure saying %q", name, c.Passed, c.Message, want)
			}
		}
	}
	// controller-runtime's lease lasts 15s; an hour later nobody renewed it.
	failing(check.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }}, check.NameLeader, "the leader is gone")
	// envtest's CA lasts about a week; ask for a year.
	failing(check.Options{MinValidity: 365 * 24 * time.Hour}, check.NameCertificate, "under the 8760h0m0s required: renew it")
	stopManager()
	failing(check.Options{}, check.NameAnswers, "did not reach the webhook")
}

func installAdmissionPolicy(t *testing.T, ctx context.Context, k8s client.Client) {
	t.Helper()
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for file, into := range map[string]client.Object{
		"validating_admission_policy.yaml": &policy, "validating_admission_policy_binding.yaml": &binding,
	} {
		data, err := os.ReadFile(testenv.Path("config", "vap", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatal(err)
		}
		into.SetName("retryguard-" + into.GetName())
		if err := k8s.Create(ctx, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
}
