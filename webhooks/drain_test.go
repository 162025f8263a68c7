package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retryguard/retryguard/webhooks"
)

// refusingServer serves one webhook at /validate that refuses every review,
// composed as internal/manager composes its server, through a real
// controller-runtime server's mux behind a real net/http server: HTTP/1.1,
// or h2 over TLS.
func refusingServer(t *testing.T, h2 bool) (*httptest.Server, *webhooks.Draining) {
	t.Helper()
	d := &webhooks.Draining{}
	base := webhook.NewServer(webhook.Options{})
	srv := webhooks.CountDenials(webhooks.Drain(base, d))
	srv.Register("/validate", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Denied("ERR_TEST: refused")
	})})
	ts := httptest.NewUnstartedServer(base.WebhookMux())
	if h2 {
		ts.EnableHTTP2 = true
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts, d
}

// answer is what one review's answer said of its connection.
type answer struct {
	reused, closed    bool
	proto, connection string
}

// postReview sends one review through ts's keep-alive client; the answer
// must be the handler's refusal.
func postReview(t *testing.T, ts *httptest.Server) answer {
	t.Helper()
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "u-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var a answer
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { a.reused = i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, ts.URL+"/validate",
		bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got admissionv1.AdmissionReview
	body, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(body, &got); err != nil || got.Response == nil || got.Response.Allowed ||
		got.Response.Result == nil || got.Response.Result.Message != "ERR_TEST: refused" {
		t.Fatalf("answer %d %s (%v), want the handler's refusal", res.StatusCode, body, err)
	}
	a.closed, a.proto, a.connection = res.Close, res.Proto, res.Header.Get("Connection")
	return a
}

// A draining replica answers every review and closes each connection after
// its answer, so that the client's next review opens a new connection
// (through the Service, to a replica that stays) instead of racing the
// replica's shutdown on an idle one. A real keep-alive client.
func TestADrainingWebhookClosesEveryConnection(t *testing.T) {
	ts, d := refusingServer(t, false)
	postReview(t, ts)
	if a := postReview(t, ts); !a.reused || a.closed {
		t.Fatalf("serving: reused %v, closed %v; want the keep-alive connection reused and kept", a.reused, a.closed)
	}
	d.Start()
	if a := postReview(t, ts); !a.reused || !a.closed {
		t.Fatalf("draining, first review: reused %v, closed %v; want it answered on the open connection, which then closes", a.reused, a.closed)
	}
	for i := range 3 {
		if a := postReview(t, ts); a.reused || !a.closed {
			t.Fatalf("draining, review %d: reused %v, closed %v; want a new connection each time, each closed after its answer", i, a.reused, a.closed)
		}
	}
}

// With --enable-http2 the webhook server speaks h2, where a Connection
// header is illegal (RFC 9113 8.2.2). Go's server must drop it (the answer
// still arrives in full, intact) and send GOAWAY instead, so that the
// client's next review opens a new connection.
func TestDrainOverHTTP2(t *testing.T) {
	ts, d := refusingServer(t, true)
	post := func() bool {
		t.Helper()
		a := postReview(t, ts)
		if a.connection != "" {
			t.Fatalf("an HTTP/2 answer carried Connection: %q", a.connection)
		}
		if a.proto != "HTTP/2.0" {
			t.Fatalf("proto %s, want HTTP/2.0", a.proto)
		}
		return a.reused
	}
	post()
	if !post() {
		t.Fatal("serving: the h2 connection was not reused")
	}
	d.Start()
	post() // answered on the open connection, which then gets GOAWAY
	for i := range 20 {
		if post() {
			t.Fatalf("draining over h2, review %d went down a reused connection: no GOAWAY", i)
		}
	}
}
