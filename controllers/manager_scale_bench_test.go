package controllers_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// BenchmarkManagerAtScale measures the manager's memory with 10,000
// policies over 100 namespaces, 20 of whose budgets are fleet budgets
// counting 100 pods each (2,000 pods), on a real API server, and how long
// each policy waits to be published. Run it once, alone:
//
//	nice go test -run '^$' -bench BenchmarkManagerAtScale -benchtime 1x -timeout 30m ./controllers/
//
// RETRYGUARD_HEAP_PROFILE=<file> writes a heap profile where memory is
// measured (go tool pprof -sample_index=inuse_space <file>).
//
// The manager runs in the benchmark's process, as in the suite: rss-MiB is
// that process's resident set (the manager, its caches and the client that
// creates the objects; kube-apiserver and etcd are processes of their own),
// heap-MiB the Go heap in use after a collection, both taken 30 s after the
// last policy was published, with the count leases renewing.
// publish-max-s is the longest time from a policy's creation to its
// ConfigMap's, in whole seconds of the API server's timestamps.
func BenchmarkManagerAtScale(b *testing.B) {
	const namespaces, perNamespace, fleets, podsPerFleet = 100, 100, 20, 100
	bctx, m, c, _ := startControllers(b)
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
		waitFor(b, 15*time.Minute, func() bool { return publishedCount(b, m, "", "", 0) == namespaces*perNamespace })
		published := time.Since(start)

		// The longest wait of any policy, creation to ConfigMap.
		var policies v1.RetryPolicyList
		if err := c.List(bctx, &policies); err != nil {
			b.Fatal(err)
		}
		var cms corev1.ConfigMapList
		if err := m.GetCache().List(bctx, &cms); err != nil {
			b.Fatal(err)
		}
		createdAt := map[string]time.Time{}
		for _, cm := range cms.Items {
			createdAt[cm.Namespace+"/"+cm.Name] = cm.CreationTimestamp.Time
		}
		var worst time.Duration
		for _, p := range policies.Items {
			if at, ok := createdAt[p.Namespace+"/retrypolicy-"+p.Name]; ok {
				worst = max(worst, at.Sub(p.CreationTimestamp.Time))
			}
		}
		time.Sleep(30 * time.Second) // leases renew; the caches settle
		runtime.GC()
		if path := os.Getenv("RETRYGUARD_HEAP_PROFILE"); path != "" {
			// What the heap holds here, with the manager running (go
			// test's -memprofile is written after it has stopped).
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(published.Seconds(), "publish-all-s")
		b.ReportMetric(worst.Seconds(), "publish-max-s")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(ms.Sys)/(1<<20), "go-sys-MiB")
		b.ReportMetric(rssMiB(b), "rss-MiB")
	}
}

// rssMiB is this process's resident set size, from /proc/self/status.
func rssMiB(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
