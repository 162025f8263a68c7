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

// A draining replica answers every review and closes each connection after
// its answer, so that the client's next review opens a new connection
// (through the Service, to a replica that stays) instead of racing the
// replica's shutdown on an idle one. A real controller-runtime server's mux
// behind a real net/http server, and a real keep-alive client.
func TestADrainingWebhookClosesEveryConnection(t *testing.T) {
	var d webhooks.Draining
	base := webhook.NewServer(webhook.Options{})
	srv := webhooks.CountDenials(webhooks.Drain(base, &d))
	srv.Register("/validate", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Denied("ERR_TEST: refused")
	})})
	ts := httptest.NewServer(base.WebhookMux())
	defer ts.Close()

	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "u-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// post sends one review and reports whether it went down a reused
	// connection and whether the answer closed it; the answer must be the
	// handler's.
	post := func() (reused, closed bool) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
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
		return reused, res.Close
	}

	post()
	if reused, closed := post(); !reused || closed {
		t.Fatalf("serving: reused %v, closed %v; want the keep-alive connection reused and kept", reused, closed)
	}
	d.Start()
	if reused, closed := post(); !reused || !closed {
		t.Fatalf("draining, first review: reused %v, closed %v; want it answered on the open connection, which then closes", reused, closed)
	}
	for i := range 3 {
		if reused, closed := post(); reused || !closed {
			t.Fatalf("draining, review %d: reused %v, closed %v; want a new connection each time, each closed after its answer", i, reused, closed)
		}
	}
}
