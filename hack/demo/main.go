// Command demo tells Retryguard's story on an embedded local control plane:
// the RETRY-SMS-001 policies are accepted, INC-2901's configuration and its
// cousins are refused with their codes, and everything is torn down.
// Run it with `make demo`.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return fmt.Errorf("the demo drives the cluster with kubectl, which is not on PATH: %w", err)
	}
	tmp, err := os.MkdirTemp("", "retryguard-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	ctrl.SetLogger(logr.Discard()) // the story is the output
	ctx := context.Background()
	s := &story{w: w, kubectlBin: kubectl, kubeconfig: filepath.Join(tmp, "kubeconfig")}
	s.chapter("Retryguard: retries as a governed policy",
		"INC-2901: an SMS gateway at 1,200 req/s retried 429s immediately and without a budget.",
		"Traffic reached 9,600 req/s (8x) and the vendor banned its IPs for 35 minutes.",
		"Retryguard makes that configuration impossible to apply. Starting a local control plane",
		"with Retryguard's manager, its admission webhooks and kube-controller-manager...")
	cluster, err := testenv.Up(ctx, s.kubeconfig, policygraph.DefaultLimits())
	if err != nil {
		return err
	}
	s.settle = func() error { return testenv.Settle(ctx, cluster.Manager) }
	s.converged = func() error { return testenv.Converged(ctx, cluster.Manager) }
	s.reader = cluster.Manager.GetAPIReader()
	defer func() {
		s.chapter("Tearing down", "Stopping the manager, kube-controller-manager, kube-apiserver and etcd.")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()

	s.chapter("1. The platform team applies the RETRY-SMS-001 policies",
		"A budget of 10% of primary traffic, and a 2FA connector with 3 total attempts, full jitter,",
		"a 4 s deadline and a stable idempotency key. A marketing caller gets its own pool and budget.")
	if err := s.apply("-k", testenv.Path("config", "samples")); err != nil {
		return err
	}
	if err := s.converged(); err != nil {
		return err
	}
	if err := s.kubectl("get", "rb,rp"); err != nil {
		return err
	}
	s.note("The controller published each policy, budget inlined, to a ConfigMap that pods watch:")
	if err := s.kubectl("get", "cm", "-l", "policy.retryguard.io/policy=sms-2fa-dispatch"); err != nil {
		return err
	}
	if err := s.payload("sms-2fa-dispatch"); err != nil {
		return err
	}

	s.chapter("2. The API server filled in every default",
		"The marketing policy did not say how long to wait for a Retry-After or what to retry on:")
	if err := s.kubectl("get", "rp", "marketing-campaign-notify", "-o",
		`jsonpath={"backoff: "}{.spec.backoff}{"\nminRemaining: "}{.spec.minRemaining}{"\nretryAfter: "}{.spec.retryAfter}{"\nretryOn: "}{.spec.retryOn}`+
			`{"\n"}`); err != nil {
		return err
	}

	s.chapter("3. Unsafe policies are refused before they reach a pod",
		"Rules about one object are CEL in the CRD; rules about several are the admission webhooks'.",
		"Each refusal names the field, the rule and a stable code that runbooks and alerts can match.")
	unsafe, err := filepath.Glob(testenv.Path("hack", "demo", "unsafe", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(unsafe)
	for _, f := range unsafe {
		s.note(firstComment(f))
		if err := s.apply("-f", f); err == nil {
			return fmt.Errorf("%s was accepted; it must be refused", filepath.Base(f))
		}
		s.refused++
	}

	s.chapter("4. Retries multiply across layers",
		"Each team's policy looks modest on its own. The webhook multiplies them along parentRef.")
	for _, step := range []struct {
		file     string
		accepted bool
		note     string
	}{
		{"1-workflow-and-connector.yaml", true, ""},
		{"2-job.yaml", false, ""},
		{"3-one-layer-retries.yaml", true, ""},
		{"2-job.yaml", true, "The job team applies the same policy again: now it is the only layer that retries."},
	} {
		f := testenv.Path("hack", "demo", "layers", step.file)
		if step.note == "" {
			step.note = firstComment(f)
		}
		s.note(step.note)
		err := s.apply("-f", f)
		if (err == nil) != step.accepted {
			return fmt.Errorf("%s: accepted=%v, want %v", step.file, err == nil, step.accepted)
		}
		if err != nil {
			s.refused++
		}
	}

	stored, err := s.names("rp")
	if err != nil {
		return err
	}
	if err := s.converged(); err != nil {
		return err
	}
	s.note("LEAF is the calls one top-level operation can make to the dependency through each policy:")
	if err := s.kubectl("get", "rp"); err != nil {
		return err
	}
	s.chapter("5. A pod enforces the published policy",
		"The application imports runtime/: an informer watches its namespace's published ConfigMaps",
		"and every call to the vendor goes through retry.RoundTripper.")
	if err := s.pod(ctx, cluster, tmp); err != nil {
		return err
	}
	s.chapter("6. Teams in their own namespaces",
		"A workflow in one team's namespace calls a connector in another's. Layers multiply across",
		"namespaces, and a parent consents to the namespaces that may attach a layer below it,",
		"as a Gateway consents to routes.")
	if err := s.teams(); err != nil {
		return err
	}
	s.chapter("7. One budget for a fleet of pods",
		"A per-pod budget is not a budget for a dependency that 20 pods call: 20 pods each allowing",
		"20 retries/s permit 100 + 20×20 = 500 calls/s (RG-LOAD). A fleet budget divides one allowance.")
	if err := s.fleet(ctx, tmp); err != nil {
		return err
	}
	s.chapter("8. Deleting cleans up",
		"The local control plane runs kube-controller-manager's garbage collector and namespace",
		"controller, as a real cluster does.")
	if err := s.cleanup(ctx); err != nil {
		return err
	}
	s.chapter(
		"The end",
		fmt.Sprintf(
			"%d unsafe objects refused; the %d policies stored were the safe ones, pods enforced them, and deleting cleaned up after them.",
			s.refused,
			len(stored),
		),
	)
	return nil
}

// story prints the demo as a short narrative with the real kubectl output.
type story struct {
	w          io.Writer
	kubectlBin string
	kubeconfig string
	// settle waits until admission can see everything applied so far;
	// converged until the controllers have published all of it.
	settle, converged func() error
	reader            client.Reader
	// refused counts the objects admission refused, as the story meant.
	refused int
}

// payload prints a policy's published payload, indented.
func (s *story) payload(policy string) error {
	var cm corev1.ConfigMap
	if err := s.reader.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: policyconfig.ConfigMapName(policy)}, &cm); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, []byte(cm.Data[policyconfig.DataKey]), "   ", "  "); err != nil {
		return err
	}
	fmt.Fprintf(s.w, "\n   $ kubectl get cm %s -o jsonpath='{.data.policy\\.json}'\n   %s\n", cm.Name, pretty.String())
	return nil
}

// apply runs kubectl apply, then lets the webhooks' cache catch up, as
// minutes between two teams' applies would in a real cluster.
func (s *story) apply(args ...string) error {
	err := s.kubectl(append([]string{"apply"}, args...)...)
	if settleErr := s.settle(); settleErr != nil {
		return settleErr
	}
	return err
}

func (s *story) chapter(title string, lines ...string) {
	fmt.Fprintf(s.w, "\n== %s\n", title)
	for _, l := range lines {
		fmt.Fprintln(s.w, "   "+l)
	}
}

func (s *story) note(line string) { fmt.Fprintf(s.w, "\n   # %s\n", line) }

// kubectl runs kubectl against the demo cluster and prints what it printed,
// indented under the command line. A refusal is returned as an error.
func (s *story) kubectl(args ...string) error {
	fmt.Fprintf(s.w, "\n   $ kubectl %s\n", strings.Join(shorten(args), " "))
	var out bytes.Buffer
	cmd := exec.Command(s.kubectlBin, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Fprintln(s.w, "   "+l)
	}
	return err
}

// names lists the names of one resource quietly.
func (s *story) names(resource string) ([]string, error) {
	out, err := exec.Command(s.kubectlBin, "--kubeconfig", s.kubeconfig, "get", resource, "-o", "name").Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// shorten shows repository paths relative to the checkout, as a user types
// them, and files the demo wrote in its temporary directory by their names.
func shorten(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if rel, err := filepath.Rel(os.TempDir(), a); err == nil && filepath.IsAbs(a) && !strings.HasPrefix(rel, "..") {
			a = filepath.Base(a)
		} else if rel, err := filepath.Rel(testenv.RepoRoot(), a); err == nil && filepath.IsAbs(a) {
			a = rel
		}
		if strings.HasPrefix(a, "jsonpath=") {
			a = "jsonpath='...'"
		}
		out[i] = a
	}
	return out
}

// firstComment returns a manifest's leading comment, its one-line story.
func firstComment(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return filepath.Base(path)
	}
	var words []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		words = append(words, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	}
	return strings.Join(words, " ")
}
