package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return res.StatusCode
}

// sidecar is one started in-process by startSidecar.
type sidecar struct {
	port                   int // the route's
	admin, metrics         string
	deadLetters, dir       string
	policies, routes       string
	adminPort, metricsPort int
}

// startSidecar runs the sidecar as the injector runs it, in-process: one
// route to upstream under the SMS policy, from a file, the policies from a
// mounted volume, dead letters in a journal. It returns once it is ready and
// stops it with the test.
func startSidecar(t *testing.T, upstream string, tweak ...func(*options)) sidecar {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	if err := os.Mkdir(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	p := fixtures.SMS()
	p.Policy.Namespace = "sidecar"
	data, err := policyconfig.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, policyconfig.DataKey), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "sidecar")
	sc := sidecar{port: freePort(t), adminPort: freePort(t), metricsPort: freePort(t), dir: dir, policies: policies,
		deadLetters: filepath.Join(dir, "dl.journal"), routes: filepath.Join(dir, "routes.json")}
	sc.admin, sc.metrics = fmt.Sprintf("http://127.0.0.1:%d", sc.adminPort), fmt.Sprintf("http://127.0.0.1:%d", sc.metricsPort)
	table := fmt.Sprintf(`{"routes":[{"port":%d,"pathPrefix":"/v1/","policy":"sms-2fa-dispatch","upstream":%q}]}`, sc.port, upstream)
	if err := os.WriteFile(sc.routes, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{routes: sc.routes, watch: "files", policyDir: policies, deadLetters: sc.deadLetters,
		listenHost: "127.0.0.1", adminPort: sc.adminPort, metricsPort: sc.metricsPort}
	for _, f := range tweak {
		f(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(sc.metrics + "/readyz")
		if err == nil && res.StatusCode == 200 {
			_ = res.Body.Close()
			return sc
		}
		select {
		case err := <-done:
			t.Fatalf("the sidecar stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The sidecar as the injector runs it: a request to the route's loopback
// port reaches the upstream under the policy; the admin port says what it
// enforces and lists its dead letters; the metrics port serves /metrics.
func TestTheSidecarServesItsRoutesAndItsAdminPort(t *testing.T) {
	var statuses atomic.Int32
	statuses.Store(201)
	var keys []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(int(statuses.Load()))
	}))
	defer upstream.Close()
	sc := startSidecar(t, upstream.URL)
	port, adminURL := sc.port, sc.admin

	send := func() int {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/messages", port), strings.NewReader("{}"))
		req.Header.Set("Retryguard-Var-User-Id", "42")
		req.Header.Set("Retryguard-Var-Login-Session-Id", "s-9")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	if got := send(); got != 201 || len(keys) != 1 || keys[0] != "SMS-2FA-42-s-9" {
		t.Fatalf("status %d, keys %q; want 201 with the rendered key", got, keys)
	}
	statuses.Store(400)
	if got := send(); got != 400 {
		t.Fatalf("status %d, want the upstream's 400", got)
	}
	var view struct {
		Found       bool  `json:"found"`
		MaxAttempts int32 `json:"maxAttempts"`
		Budget      *struct {
			Name        string `json:"name"`
			Denominator int64  `json:"denominator"`
		} `json:"budget"`
	}
	if code := getJSON(t, adminURL+"/policies/sms-2fa-dispatch", &view); code != 200 || !view.Found || view.MaxAttempts != 3 ||
		view.Budget == nil || view.Budget.Name != "telephony-provider" || view.Budget.Denominator != 1 {
		t.Fatalf("/policies: %d %+v", code, view)
	}
	var letters struct {
		Unforwarded int `json:"unforwarded"`
		Letters     []struct {
			Key  string `json:"key"`
			Code string `json:"code"`
		} `json:"letters"`
	}
	if code := getJSON(t, adminURL+"/deadletters", &letters); code != 200 || letters.Unforwarded != 1 || len(letters.Letters) != 1 ||
		letters.Letters[0].Key != "SMS-2FA-42-s-9" || letters.Letters[0].Code != "ERR_PERMANENT_FAILURE" {
		t.Fatalf("/deadletters: %d %+v", code, letters)
	}
	res, err := http.Get(sc.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
}

// podAddresses are the machine's non-loopback IPv4 addresses: where another
// pod reaches this one.
func podAddresses(t *testing.T) []net.IP {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	var out []net.IP
	for _, a := range addrs {
		if ip, _, _ := net.ParseCIDR(a.String()); ip != nil && !ip.IsLoopback() && ip.To4() != nil {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		t.Skip("no non-loopback IPv4 address to reach the sidecar from")
	}
	return out
}

// Issue 29: "Any pod in the cluster can read every dead letter." The route
// ports and the admin port (letters, policies) answer on loopback only: the
// pod's own containers. Only the metrics port, /metrics and the probes,
// answers on the pod's address.
func TestOnlyMetricsAndProbesAnswerOtherPods(t *testing.T) {
	sc := startSidecar(t, "http://127.0.0.1:1")
	for _, ip := range podAddresses(t) {
		for name, port := range map[string]int{"the route port": sc.port, "the admin port": sc.adminPort} {
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(port)), time.Second); err == nil {
				_ = c.Close()
				t.Errorf("%s answers on %s", name, ip)
			}
		}
		other := fmt.Sprintf("http://%s", net.JoinHostPort(ip.String(), fmt.Sprint(sc.metricsPort)))
		for path, want := range map[string]int{"/metrics": 200, "/readyz": 200, "/healthz": 200, "/deadletters": 404, "/policies/sms-2fa-dispatch": 404} {
			res, err := http.Get(other + path)
			if err != nil {
				t.Fatalf("%s%s: %v", other, path, err)
			}
			_ = res.Body.Close()
			if res.StatusCode != want {
				t.Errorf("%s%s: %d, want %d", other, path, res.StatusCode, want)
			}
		}
	}
}

// A route table the proxy refuses stops it at start, naming the file and the field.
func TestABadRouteTableStopsTheSidecar(t *testing.T) {
	routes := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(routes, []byte(`{"routes":[{"port":15020,"policy":"p","upstream":"https://h"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), options{routes: routes, watch: "files", adminPort: 15020, metricsPort: 15090})
	if err == nil || !strings.Contains(err.Error(), routes) || !strings.Contains(err.Error(), "routes[0].port") {
		t.Fatalf("run: %v, want the file and routes[0].port", err)
	}
}

// writeLetters writes n letters, each with a key of keyBytes, to a new
// journal at path, with writers at once (the journal's group commit; one
// writer keeps the operations in order).
func writeLetters(t *testing.T, path string, n, keyBytes, writers int) {
	t.Helper()
	j, err := deadletter.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := atomic.Int64{}
	for range writers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				l := retry.DeadLetter{OperationID: uint64(i), Namespace: "sidecar", Policy: "sms-2fa-dispatch",
					Key: fmt.Sprintf("%d-%s", i, strings.Repeat("k", keyBytes)), State: retry.UnknownOutcome, Code: codes.UnknownOutcome}
				if err := j.Write(context.Background(), l); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// lettersAnswer mirrors /deadletters.
type lettersAnswer struct {
	Unforwarded int  `json:"unforwarded"`
	More        bool `json:"more"`
	Letters     []struct {
		Operation uint64 `json:"operation"`
	} `json:"letters"`
	Error string `json:"error"`
}

// /deadletters answers the oldest letters, DefaultLetterLimit of them unless
// ?limit= says fewer, says whether more follow and how many are not yet
// forwarded; a limit outside 1..MaxLetterLimit is refused with its code.
func TestDeadLettersAnswersALimitedPage(t *testing.T) {
	sc := startSidecar(t, "http://127.0.0.1:1", func(o *options) { writeLetters(t, o.deadLetters, DefaultLetterLimit+5, 8, 1) })
	var page lettersAnswer
	if code := getJSON(t, sc.admin+"/deadletters", &page); code != 200 || len(page.Letters) != DefaultLetterLimit || !page.More ||
		page.Unforwarded != DefaultLetterLimit+5 || page.Error != "" {
		t.Fatalf("/deadletters: %d, %d letters, more %v, unforwarded %d, %q", code, len(page.Letters), page.More, page.Unforwarded, page.Error)
	}
	for i, l := range page.Letters {
		if l.Operation != uint64(i) {
			t.Fatalf("letter %d is operation %d: not oldest first", i, l.Operation)
		}
	}
	page = lettersAnswer{}
	if code := getJSON(t, sc.admin+"/deadletters?limit=200", &page); code != 200 || len(page.Letters) != DefaultLetterLimit+5 || page.More {
		t.Fatalf("?limit=200: %d, %d letters, more %v", code, len(page.Letters), page.More)
	}
	for _, bad := range []string{"0", "-1", fmt.Sprint(MaxLetterLimit + 1), "ten"} {
		res, err := http.Get(sc.admin + "/deadletters?limit=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != 400 || !strings.Contains(string(body), "limit: "+string(codes.OutOfRange)) {
			t.Errorf("?limit=%s: %d %s", bad, res.StatusCode, body)
		}
	}
}

// Issue 29: "Each request loads the whole journal: a 48 MiB journal took 59
// MiB of heap per request against the 128 Mi limit." A 16 MiB journal is
// streamed: once the first bytes of the answer arrive, and while the
// application has not read the rest (the sidecar is blocked writing), the
// live heap holds a few letters, not the journal.
func TestDeadLettersStreamsAJournalLargerThanItsHeap(t *testing.T) {
	const letters, keyBytes = 256, 64 << 10
	sc := startSidecar(t, "http://127.0.0.1:1", func(o *options) { writeLetters(t, o.deadLetters, letters, keyBytes, 16) })
	fi, err := os.Stat(sc.deadLetters)
	if err != nil {
		t.Fatal(err)
	}
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	res, err := http.Get(fmt.Sprintf("%s/deadletters?limit=%d", sc.admin, MaxLetterLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.ReadFull(res.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	grew := heap() - before
	t.Logf("journal %d bytes; live heap grew %d bytes while its answer streamed", fi.Size(), grew)
	if grew > fi.Size()/4 {
		t.Fatalf("serving /deadletters of a %d-byte journal holds %d bytes of heap", fi.Size(), grew)
	}
	var page lettersAnswer
	if err := json.NewDecoder(io.MultiReader(strings.NewReader("{"), res.Body)).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if len(page.Letters) != letters || page.More || page.Unforwarded != letters {
		t.Fatalf("%d letters, more %v, unforwarded %d; want all %d", len(page.Letters), page.More, page.Unforwarded, letters)
	}
}
