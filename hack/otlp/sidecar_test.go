package otlp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// buildProxy builds cmd/retryguard-proxy from the work tree into dir.
func buildProxy(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "retryguard-proxy")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/retryguard-proxy")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/retryguard-proxy: %v\n%s", err, out)
	}
	return bin
}

// The sidecar, as its own process with OTEL_EXPORTER_OTLP_ENDPOINT set,
// exports the trace of a request it retried to the Collector's OTLP
// receiver: the operation's span a child of the application's span (its
// traceparent), a client span per attempt, the resend carrying
// http.request.resend_count, each attempt's traceparent sent upstream.
func TestSidecarExportsOneTracePerRequestToTheReceiver(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := startReceiver(t)
			endpoint := "http://" + rcv.httpAddr
			if protocol == "grpc" {
				endpoint = "http://" + rcv.grpcAddr
			}
			sc := startSidecar(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+protocol, "OTEL_BSP_SCHEDULE_DELAY=50")

			// The application's own span, as its instrumentation would send it.
			const appTrace, appSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			sc.send(t, "00-"+appTrace+"-"+appSpan+"-01")
			spans := rcv.spans(t, 3)
			op := checkOperation(t, spans, "retryguard "+sc.policy.Policy.Name, sc.seen.all())
			if op.trace != appTrace || op.parent != appSpan {
				t.Errorf("the operation's span is %s under %s, want a child of the application's span %s in trace %s", op.id, op.parent, appSpan, appTrace)
			}
			for _, s := range spans {
				if s.serviceName != "retryguard-proxy" {
					t.Errorf("span %q has service.name %q, want retryguard-proxy", s.name, s.serviceName)
				}
			}
		})
	}
}

// sidecar is a retryguard-proxy process started by startSidecar: the
// policy of its one route, the port the route listens on, the upstream's
// traceparents, and the process.
type sidecar struct {
	policy *policyconfig.Payload
	port   int
	seen   *traceparents
	cmd    *exec.Cmd
}

// startSidecar builds and starts the proxy, with env added to the test's
// environment, in front of a flaky upstream (a 503, then 200s), and waits
// until it is ready. It is interrupted, as the kubelet stops it, at the
// test's end unless the test has already stopped it.
func startSidecar(t *testing.T, env ...string) *sidecar {
	t.Helper()
	dir := t.TempDir()
	bin := buildProxy(t, dir)
	policies := filepath.Join(dir, "policies")
	if err := os.Mkdir(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	p := fixtures.SMS()
	p.Policy.Namespace = "sidecar"
	p.Policy.ConnectionPool = nil
	data, err := policyconfig.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, policyconfig.DataKey), data, 0o644); err != nil {
		t.Fatal(err)
	}
	upstream, seen := flaky(t)
	port, admin, metrics := freePort(t), freePort(t), freePort(t)
	routes := filepath.Join(dir, "routes.json")
	table := fmt.Sprintf(`{"routes":[{"port":%d,"pathPrefix":"/v1/","policy":%q,"upstream":%q}]}`, port, p.Policy.Name, upstream.URL)
	if err := os.WriteFile(routes, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--routes", routes, "--watch", "files", "--policy-dir", policies,
		"--dead-letters", filepath.Join(dir, "dl.journal"), "--admin-port", strconv.Itoa(admin), "--metrics-port", strconv.Itoa(metrics))
	cmd.Env = append(append(os.Environ(), "POD_NAMESPACE=sidecar"), env...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the sidecar's output:\n%s", stderr.String())
		}
	})
	waitReady(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", metrics))
	return &sidecar{policy: p, port: port, seen: seen, cmd: cmd}
}

// send sends the application's request through the sidecar, under the
// application's span (its traceparent), and wants the retried 200.
func (s *sidecar) send(t *testing.T, traceparent string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/messages", s.port), strings.NewReader(`{"to":"+1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", traceparent)
	req.Header.Set("Retryguard-Var-User-Id", "42")
	req.Header.Set("Retryguard-Var-Login-Session-Id", "s-9")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("the sidecar answered %d, want the second attempt's 200", res.StatusCode)
	}
}

// A sidecar stopped as the kubelet stops it (SIGINT here, as SIGTERM) exports
// the spans its batch still held: with a schedule delay of a minute, none
// is sent before the stop, and all of them by the time the process exits.
func TestSidecarFlushesItsSpansWhenStopped(t *testing.T) {
	rcv := startReceiver(t)
	sc := startSidecar(t, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+rcv.httpAddr, "OTEL_BSP_SCHEDULE_DELAY=60000")
	sc.send(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if n := rcv.sink.SpanCount(); n != 0 {
		t.Fatalf("the receiver got %d spans before the stop; the batch was to hold them", n)
	}
	if err := sc.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := sc.cmd.Wait(); err != nil {
		t.Fatalf("the sidecar exited with %v", err)
	}
	if n := rcv.sink.SpanCount(); n != 3 {
		t.Fatalf("the receiver got %d spans by the sidecar's exit, want the operation's and its two attempts'", n)
	}
	checkOperation(t, rcv.spans(t, 3), "retryguard "+sc.policy.Policy.Name, sc.seen.all())
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(url)
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never became ready at %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
