package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	retryotel "github.com/retryguard/retryguard/runtime/otel"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// tracerOverHTTP is a TracerProvider that exports each span to the
// receiver over OTLP/HTTP as it ends.
func (r *receiver) tracerOverHTTP(t *testing.T) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(r.httpAddr), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// flaky is a loopback server that answers its first request 503 and every
// later one 200, recording each request's traceparent.
func flaky(t *testing.T) (*httptest.Server, *traceparents) {
	t.Helper()
	seen := new(traceparents)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r.Header.Get("Traceparent"))
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// A request through retry.RoundTripper with the OpenTelemetry observer
// reaches the Collector's OTLP receiver as one trace: the operation's span
// and a client span per attempt, the resend carrying
// http.request.resend_count, and each attempt's traceparent sent with it.
// Beside it, the OTel metrics count the attempts and time the operation.
func TestRoundTripperAttemptsAreOneTraceInTheReceiver(t *testing.T) {
	rcv := startReceiver(t)
	tp := rcv.tracerOverHTTP(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := retryotel.New(retryotel.WithTracerProvider(tp), retryotel.WithMeterProvider(mp), retryotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		t.Fatal(err)
	}

	srv, seen := flaky(t)
	p := fixtures.SMS()
	p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate, p.Policy.ConnectionPool = "ledger-read", "GET /v1/balance", "", nil
	ex := retry.New(watch.NewStatic(p), retry.WithObserver(obs))
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: p.Policy.Name}}
	res, err := client.Get(srv.URL + "/v1/balance?account=secret")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("got %d %q, want the second attempt's 200", res.StatusCode, body)
	}
	op := checkOperation(t, rcv.spans(t, 3), "retryguard ledger-read", seen.all())
	if op.parent != "" {
		t.Errorf("the operation's span has parent %s; the request carried no trace", op.parent)
	}
	for _, s := range rcv.spans(t, 3) {
		if v, ok := s.attr("url.full"); ok && v.Str() != srv.URL+"/v1/balance" {
			t.Errorf("url.full = %q, want the URL without its query (%s/v1/balance)", v.Str(), srv.URL)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == retryotel.AttemptsMetric {
				var total int64
				for _, dp := range s.DataPoints {
					total += dp.Value
				}
				if total != 2 {
					t.Errorf("%s counts %d attempts, want 2", m.Name, total)
				}
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == retryotel.OperationDurationMetric {
				if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 {
					t.Errorf("%s holds %v, want one operation", m.Name, h.DataPoints)
				}
			}
		}
	}
	if !got[retryotel.AttemptsMetric] || !got[retryotel.OperationDurationMetric] {
		t.Errorf("the metrics recorded are %v, want %s and %s", got, retryotel.AttemptsMetric, retryotel.OperationDurationMetric)
	}
}

// A request refused for its key before any attempt (the template names a
// variable the request does not carry) reaches the receiver as one span, of
// no attempt, in error with the refusal's code: a trace says why nothing
// was sent. It holds no state attribute: the operation never entered the
// state machine.
func TestARequestRefusedForItsKeyIsOneSpanInTheReceiver(t *testing.T) {
	rcv := startReceiver(t)
	tp := rcv.tracerOverHTTP(t)
	obs, err := retryotel.New(retryotel.WithTracerProvider(tp), retryotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		t.Fatal(err)
	}
	srv, seen := flaky(t)
	p := fixtures.SMS() // its key template names {user_id} and {login_session_id}
	ex := retry.New(watch.NewStatic(p), retry.WithObserver(obs))
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: p.Policy.Name}}
	if res, err := client.Post(srv.URL+"/v1/messages", "application/json", nil); err == nil {
		_ = res.Body.Close()
		t.Fatalf("a request without its key's variables was sent: %d", res.StatusCode)
	}
	spans := rcv.spans(t, 1)
	if len(spans) != 1 || len(seen.all()) != 0 {
		t.Fatalf("got spans %v and %d requests at the server, want one span and none", names(spans), len(seen.all()))
	}
	s := spans[0]
	code, _ := s.attr(string(retryotel.CodeKey))
	errType, _ := s.attr("error.type")
	attempts, _ := s.attr(string(retryotel.AttemptsKey))
	_, hasState := s.attr(string(retryotel.StateKey))
	if s.status != ptrace.StatusCodeError || code.Str() != string(codes.MissingKeyVariable) || errType.Str() != code.Str() || attempts.Int() != 0 || hasState {
		t.Errorf("the span: status %v, code %q, error.type %q, attempts %d, a state attribute %t; want an error, %s twice, 0, none",
			s.status, code.Str(), errType.Str(), attempts.Int(), hasState, codes.MissingKeyVariable)
	}
}
