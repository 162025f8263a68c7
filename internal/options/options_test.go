package options

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/webhooks"
)

func parse(t *testing.T, args ...string) (Manager, error) {
	t.Helper()
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Manager
	o.AddFlags(fs)
	return o, fs.Parse(args)
}

// Every default is valid, and each is the constant the chart names.
func TestDefaultsAreValid(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	want := Manager{
		MetricsAddr: DefaultMetricsAddr, ProbeAddr: DefaultProbeAddr, MetricsSecure: true, LeaderElect: true, EnableWebhooks: true,
		WebhookCertDir: DefaultWebhookCertDir, WebhookPort: DefaultWebhookPort, MaxConcurrentReconciles: controllers.DefaultMaxConcurrentReconciles,
		ResyncPeriod: controllers.DefaultResyncPeriod, ShutdownDrain: webhooks.DefaultShutdownDrain, Limits: policygraph.DefaultLimits(),
		CertRotation: CertRotation{Namespace: o.CertRotation.Namespace, Secret: DefaultCertSecret, Service: DefaultWebhookService,
			WebhookConfiguration: DefaultWebhookConfiguration, InjectorConfiguration: DefaultInjectorConfiguration},
	}
	if o != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", o, want)
	}
}

func TestValidate(t *testing.T) {
	for args, want := range map[string]string{
		"--resync-period=-1s":                                   "--resync-period -1s: must not be negative",
		"--shutdown-drain=-1s":                                  "--shutdown-drain -1s: must not be negative",
		"--cert-rotation --namespace=":                          "--cert-rotation needs --namespace",
		"--cert-rotation --namespace=x --cert-secret=":          "--cert-rotation needs --cert-secret",
		"--cert-rotation --enable-webhooks=false --namespace=x": "--cert-rotation needs --enable-webhooks",
	} {
		o, err := parse(t, strings.Fields(args)...)
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", args, err, want)
		}
	}
	// Limits built in Go, not parsed, are held to the flags' ranges too.
	o, _ := parse(t)
	o.Limits.MaxLeafAttempts, o.Limits.MaxRetryPercent = 0, 101
	err := o.Validate()
	for _, want := range []string{"--max-leaf-attempts 0: want a whole number from 1 to 1000", "--max-retry-percent 101: want a whole number from 1 to 100"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

func TestPlatformLimitFlags(t *testing.T) {
	o, err := parse(t, "--max-leaf-attempts=9", "--max-retry-percent=30")
	if err != nil || o.Limits.MaxLeafAttempts != 9 || o.Limits.MaxRetryPercent != 30 {
		t.Fatalf("got %+v, %v", o.Limits, err)
	}
	for _, args := range [][]string{{"--max-leaf-attempts=0"}, {"--max-leaf-attempts=1001"}, {"--max-retry-percent=250"}, {"--max-retry-percent=ten"}} {
		if _, err := parse(t, args...); err == nil || !strings.Contains(err.Error(), "want a whole number from 1 to") {
			t.Errorf("%v: got %v", args, err)
		}
	}
}
