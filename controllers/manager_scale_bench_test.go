package controllers_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// BenchmarkManagerAtScale measures the manager's memory with 10,000
// policies over 100 namespaces, 20 of whose budgets are fleet budgets
// counting 100 pods each (2,000 pods), on a real API server, and how long
// each policy waits to be published. Run it once, alone:
//
//	nice go test -run '^$' -bench BenchmarkManagerAtScale -benchtime 1x -timeout 30m ./controllers/
//
// By default the manager runs in the benchmark's process, as in the suite:
// rss-MiB is that process's resident set (the manager, its caches and the
// client that creates the objects; kube-apiserver and etcd are processes of
// their own), heap-MiB the Go heap in use after a collection.
// RETRYGUARD_HEAP_PROFILE=<file> then writes a heap profile where memory is
// measured (go tool pprof -sample_index=inuse_space <file>).
//
// RETRYGUARD_MANAGER_BINARY=<file> runs that manager binary (go build -o
// <file> ./cmd/manager) as a process of its own against the same API server, as a
// deployment runs it, with the benchmark's environment (GOMEMLIMIT
// included): rss-MiB and rss-peak-MiB are then the manager's alone, and
// there is no heap-MiB. RETRYGUARD_MANAGER_ARGS adds flags to its command
// line (for example --max-concurrent-reconciles=16).
//
// Memory is taken 30 s after the last policy was published, with the count
// leases renewing; rss-peak-MiB is the high-water mark (VmHWM).
// publish-max-s is the longest time from a policy's creation to its
// ConfigMap's, in whole seconds of the API server's timestamps.
func BenchmarkManagerAtScale(b *testing.B) {
	const namespaces, perNamespace, fleets, podsPerFleet = 100, 100, 20, 100
	bctx, c, pid := startManagerAtScale(b)
	parallel := func(n int, f func(i int) error) {
		var wg sync.WaitGroup
		work := make(chan int)
		errs := make(chan error, n)
		for range 16 {
			wg.Go(func() {
				for i := range work {
					if err := f(i); err != nil {
						errs <- err
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	ns := func(i int) string { return fmt.Sprintf("team-%03d", i) }
	for b.Loop() {
		parallel(namespaces, func(i int) error {
			if err := c.Create(bctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(i)}}); err != nil {
				return err
			}
			budget := fixtures.Budget(ns(i), fixtures.DefaultBudget, 10)
			if i < fleets {
				budget = fleetBudget(ns(i), fixtures.DefaultBudget, "sender", podsPerFleet)
			}
			return c.Create(bctx, budget)
		})
		parallel(fleets*podsPerFleet, func(i int) error {
			return c.Create(bctx, newPod(ns(i/podsPerFleet), fmt.Sprintf("sender-%03d", i%podsPerFleet), "sender"))
		})
		start := time.Now()
		parallel(namespaces*perNamespace, func(i int) error {
			name := fmt.Sprintf("p-%03d", i%perNamespace)
			return c.Create(bctx, fixtures.Policy(ns(i/perNamespace), name, "connector", 3, fixtures.BudgetRef(fixtures.DefaultBudget),
				fixtures.Service(name)))
		})
		created := time.Since(start)
		// Polled from the API server every 2 s, as metadata: the same
		// for either manager, and light on a server holding 10,000 of them.
		var createdAt map[string]time.Time
		for deadline := time.Now().Add(15 * time.Minute); ; time.Sleep(2 * time.Second) {
			if createdAt = publishedAt(b, c); len(createdAt) == namespaces*perNamespace {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d policies published after 15m", len(createdAt), namespaces*perNamespace)
			}
		}
		published := time.Since(start)

		// The longest wait of any policy, creation to ConfigMap.
		var policies metav1.PartialObjectMetadataList
		policies.SetGroupVersionKind(v1.GroupVersion.WithKind("RetryPolicyList"))
		if err := c.List(bctx, &policies); err != nil {
			b.Fatal(err)
		}
		var worst time.Duration
		for _, p := range policies.Items {
			if at, ok := createdAt[p.Namespace+"/"+policyconfig.ConfigMapName(p.Name)]; ok {
				worst = max(worst, at.Sub(p.CreationTimestamp.Time))
			}
		}
		time.Sleep(30 * time.Second) // leases renew; the caches settle
		status := "/proc/self/status"
		if pid != 0 {
			status = fmt.Sprintf("/proc/%d/status", pid)
		} else {
			runtime.GC()
			writeHeapProfile(b)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(ms.Sys)/(1<<20), "go-sys-MiB")
		}
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(published.Seconds(), "publish-all-s")
		b.ReportMetric(worst.Seconds(), "publish-max-s")
		b.ReportMetric(statusMiB(b, status, "VmRSS"), "rss-MiB")
		b.ReportMetric(statusMiB(b, status, "VmHWM"), "rss-peak-MiB")
	}
}

// startManagerAtScale starts a test API server and the manager: in this
// process (startControllers, pid 0) or, with RETRYGUARD_MANAGER_BINARY, as
// that binary's process, configured by a kubeconfig as a deployment is.
// It returns a context that ends with the benchmark and a client.
func startManagerAtScale(b *testing.B) (context.Context, client.Client, int) {
	binary := os.Getenv("RETRYGUARD_MANAGER_BINARY")
	if binary == "" {
		bctx, _, c, _ := startControllers(b)
		return bctx, c, 0
	}
	env, cfg := testenv.StartEnvironment(b, false)
	cfg.QPS, cfg.Burst = -1, 0
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		b.Fatal(err)
	}
	bctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--enable-webhooks=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}, strings.Fields(os.Getenv("RETRYGUARD_MANAGER_ARGS"))...)
	cmd := exec.CommandContext(bctx, binary, args...)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); _ = cmd.Wait() }) // stopped before the API server
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	return bctx, c, cmd.Process.Pid
}

// publishedAt maps each published policy ConfigMap (namespace/name) to its
// creation time, read from the API server as metadata.
func publishedAt(b *testing.B, c client.Client) map[string]time.Time {
	var cms metav1.PartialObjectMetadataList
	cms.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := c.List(context.Background(), &cms, client.HasLabels{policyconfig.PolicyLabel}); err != nil {
		b.Fatal(err)
	}
	out := make(map[string]time.Time, len(cms.Items))
	for _, cm := range cms.Items {
		out[cm.Namespace+"/"+cm.Name] = cm.CreationTimestamp.Time
	}
	return out
}

// writeHeapProfile writes what this process's heap holds now, with the
// manager running (go test's -memprofile is written after it has stopped),
// to RETRYGUARD_HEAP_PROFILE when it is set.
func writeHeapProfile(b *testing.B) {
	path := os.Getenv("RETRYGUARD_HEAP_PROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
}

// statusMiB is a field of a process's /proc/<pid>/status (VmRSS, VmHWM),
// in MiB.
func statusMiB(b *testing.B, status, field string) float64 {
	raw, err := os.ReadFile(status)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatalf("no %s in %s", field, status)
	return 0
}
