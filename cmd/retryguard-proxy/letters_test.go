package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryguard/retryguard/proxy"
)

// Issue 29: "A full journal never evicts the pod and every unkept letter is
// counted and told." At its cap the sidecar keeps serving; the answer of an
// operation whose letter was not kept says so (Retryguard-Letter: dropped,
// and "letter": "dropped" in a problem), the drop is counted by reason, and
// an upstream cannot claim the header on an answer of its own.
func TestAtTheJournalsCapTheAnswerSaysTheLetterWasNotKept(t *testing.T) {
	var status atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(proxy.LetterHeader, proxy.LetterDropped) // a claim the sidecar removes
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, `{"from":"upstream"}`)
	}))
	defer upstream.Close()
	// A cap below the journal's header: no letter fits.
	sc := startSidecar(t, upstream.URL, func(o *options) { o.deadLettersMaxBytes = 1 })
	send := func() (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/messages", sc.port), strings.NewReader("{}"))
		req.Header.Set("Retryguard-Var-User-Id", "42")
		req.Header.Set("Retryguard-Var-Login-Session-Id", "s-9")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		return res, string(body)
	}

	status.Store(http.StatusCreated)
	if res, _ := send(); res.StatusCode != 201 || res.Header.Get(proxy.LetterHeader) != "" {
		t.Fatalf("a success: %d, %s %q; want 201 without the upstream's claim", res.StatusCode, proxy.LetterHeader, res.Header.Get(proxy.LetterHeader))
	}
	// A permanent failure: the upstream's own answer, with the header.
	status.Store(http.StatusBadRequest)
	if res, body := send(); res.StatusCode != 400 || res.Header.Get(proxy.LetterHeader) != proxy.LetterDropped || body != `{"from":"upstream"}` {
		t.Fatalf("a permanent failure: %d, %s %q, %s", res.StatusCode, proxy.LetterHeader, res.Header.Get(proxy.LetterHeader), body)
	}
	// Retries exhausted: the proxy's problem, with the header and the member.
	status.Store(http.StatusServiceUnavailable)
	res, body := send()
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%d %s: %v", res.StatusCode, body, err)
	}
	if res.StatusCode != 503 || res.Header.Get(proxy.LetterHeader) != proxy.LetterDropped || p["letter"] != proxy.LetterDropped || p["code"] == nil ||
		res.Header.Get("Retryguard-Code") == "" {
		t.Fatalf("retries exhausted: %d, %s %q, %s", res.StatusCode, proxy.LetterHeader, res.Header.Get(proxy.LetterHeader), body)
	}

	var page lettersAnswer
	if code := getJSON(t, sc.admin+"/deadletters", &page); code != 200 || len(page.Letters) != 0 {
		t.Fatalf("/deadletters: %d, %d letters", code, len(page.Letters))
	}
	mres, err := http.Get(sc.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mres.Body)
	_ = mres.Body.Close()
	const dropped = "retryguard_proxy_dead_letters_dropped_total"
	for _, want := range []string{dropped + `{reason="full"} 2`, dropped + `{reason="error"} 0`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
