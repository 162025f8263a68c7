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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/policyconfig"
	"github.com/retryguard/retryguard/runtime/policyconfig/fixtures"
)

func freePort(t *testing.T) int {
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

// The sidecar as the injector runs it, in-process: the route table from a
// file, the policies from a mounted volume, dead letters in a journal. A
// request to the route's loopback port reaches the upstream under the
// policy; the admin port says what it enforces and lists its dead letters.
func TestTheSidecarServesItsRoutesAndItsAdminPort(t *testing.T) {
	var statuses atomic.Int32
	statuses.Store(201)
	var keys []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(int(statuses.Load()))
	}))
	defer upstream.Close()
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
	port, admin := freePort(t), freePort(t)
	routes := filepath.Join(dir, "routes.json")
	table := fmt.Sprintf(`{"routes":[{"port":%d,"pathPrefix":"/v1/","policy":"sms-2fa-dispatch","upstream":%q}]}`, port, upstream.URL)
	if err := os.WriteFile(routes, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{routes: routes, watch: "files", policyDir: policies, deadLetters: filepath.Join(dir, "dl.journal"),
			listenHost: "127.0.0.1", adminPort: admin})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", admin)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(adminURL + "/readyz")
		if err == nil && res.StatusCode == 200 {
			_ = res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

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
	if code := getJSON(t, adminURL+"/metrics", nil); code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	// Route listeners are loopback only: the pod's own containers call them.
	if addrs, _ := net.InterfaceAddrs(); len(addrs) > 0 {
		for _, a := range addrs {
			ip, _, _ := net.ParseCIDR(a.String())
			if ip == nil || ip.IsLoopback() || ip.To4() == nil {
				continue
			}
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(port)), time.Second); err == nil {
				_ = c.Close()
				t.Fatalf("the route port answers on %s", ip)
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
	err := run(context.Background(), options{routes: routes, watch: "files", adminPort: 15020})
	if err == nil || !strings.Contains(err.Error(), routes) || !strings.Contains(err.Error(), "routes[0].port") {
		t.Fatalf("run: %v, want the file and routes[0].port", err)
	}
}
