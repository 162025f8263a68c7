package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/proxy"
)

// connections is the benchmark's load: as many as issue 29 took past the
// sidecar's memory limit.
const connections = 1000

// BenchmarkSidecarUnderAThousandConnections runs the real binary as its own
// process, as the injector runs it (GOMEMLIMIT from its memory limit), and
// sends it requests from 1,000 connections at once, each a 4 KiB POST to a
// loopback upstream that answers in 20 ms: the sidecar's peak RSS
// (VmHWM), against proxy.MemoryLimit. It reports peak-rss-MiB, limit-MiB,
// and the answers of each kind.
func BenchmarkSidecarUnderAThousandConnections(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "retryguard-proxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(strings.Repeat("y", 1024)))
	}))
	defer upstream.Close()
	upstream.Config.SetKeepAlivesEnabled(true)

	policies := filepath.Join(dir, "policies")
	if err := os.Mkdir(policies, 0o755); err != nil {
		b.Fatal(err)
	}
	p := fixtures.SMS()
	p.Policy.Namespace = "bench"
	p.Policy.ConnectionPool = nil
	data, err := policyconfig.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, policyconfig.DataKey), data, 0o644); err != nil {
		b.Fatal(err)
	}
	port, admin, metrics := freePort(b), freePort(b), freePort(b)
	routes := filepath.Join(dir, "routes.json")
	table := fmt.Sprintf(`{"routes":[{"port":%d,"pathPrefix":"/v1/","policy":"sms-2fa-dispatch","upstream":%q}]}`, port, upstream.URL)
	if err := os.WriteFile(routes, []byte(table), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--routes", routes, "--watch", "files", "--policy-dir", policies,
		"--dead-letters", filepath.Join(dir, "dl.journal"), "--admin-port", strconv.Itoa(admin), "--metrics-port", strconv.Itoa(metrics))
	cmd.Env = append(os.Environ(), "POD_NAMESPACE=bench", "GOMEMLIMIT="+strconv.Itoa(proxy.MemoryLimit))
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	waitReady(b, fmt.Sprintf("http://127.0.0.1:%d/readyz", metrics))

	url := fmt.Sprintf("http://127.0.0.1:%d/v1/messages", port)
	body := strings.Repeat("x", 4096)
	var ok, busy, other atomic.Int64
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range connections {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}, Timeout: 30 * time.Second}
				defer client.CloseIdleConnections()
				<-start
				for i := range 5 {
					req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
					req.Header.Set("Retryguard-Var-User-Id", strconv.Itoa(c))
					req.Header.Set("Retryguard-Var-Login-Session-Id", strconv.Itoa(i))
					res, err := client.Do(req)
					if err != nil {
						other.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
					switch res.StatusCode {
					case http.StatusCreated:
						ok.Add(1)
					case http.StatusServiceUnavailable:
						busy.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	b.StopTimer()
	hwm := peakRSS(b, cmd.Process.Pid)
	b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(proxy.MemoryLimit)/(1<<20), "limit-MiB")
	n := float64(b.N)
	b.ReportMetric(float64(ok.Load())/n, "created/op")
	b.ReportMetric(float64(busy.Load())/n, "busy/op")
	b.ReportMetric(float64(other.Load())/n, "other/op")
	if hwm >= proxy.MemoryLimit {
		b.Errorf("peak RSS %d bytes, at or above the injected limit %d", hwm, proxy.MemoryLimit)
	}
}

func waitReady(b *testing.B, url string) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if res, err := http.Get(url); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
	}
	b.Fatalf("%s never answered 200", url)
}

// peakRSS is a process's VmHWM from /proc, in bytes.
func peakRSS(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if kb, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return v << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
