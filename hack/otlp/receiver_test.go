// Package otlp tests Retryguard's traces against a real OTLP receiver: the
// OpenTelemetry Collector's own otlpreceiver, started in the test, its spans
// read back from a sink. It is a module of its own so that the Collector's
// dependencies burden neither the runtime nor the operator.
package otlp

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// receiver is a started otlpreceiver with OTLP/HTTP and OTLP/gRPC on
// loopback ports, and the sink its traces go to.
type receiver struct {
	httpAddr, grpcAddr string
	sink               *consumertest.TracesSink
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	r := &receiver{httpAddr: freeAddr(t), grpcAddr: freeAddr(t), sink: new(consumertest.TracesSink)}
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = r.httpAddr
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = r.grpcAddr
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, r.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r
}

// span is one span as the receiver got it.
type span struct {
	name        string
	trace       string
	id, parent  string
	kind        ptrace.SpanKind
	attrs       pcommon.Map
	status      ptrace.StatusCode
	serviceName string
	scope       string
}

func (s span) attr(key string) (pcommon.Value, bool) { return s.attrs.Get(key) }

// spans waits until the receiver holds at least n spans, and returns them.
func (r *receiver) spans(t *testing.T, n int) []span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out []span
		for _, td := range r.sink.AllTraces() {
			for _, rs := range td.ResourceSpans().All() {
				svc, hasSvc := rs.Resource().Attributes().Get("service.name")
				for _, ss := range rs.ScopeSpans().All() {
					for _, sp := range ss.Spans().All() {
						tid, sid := sp.TraceID(), sp.SpanID()
						s := span{name: sp.Name(), trace: hex.EncodeToString(tid[:]), id: hex.EncodeToString(sid[:]),
							kind: sp.Kind(), attrs: sp.Attributes(), status: sp.Status().Code(), scope: ss.Scope().Name()}
						if pid := sp.ParentSpanID(); !pid.IsEmpty() {
							s.parent = hex.EncodeToString(pid[:])
						}
						if hasSvc {
							s.serviceName = svc.Str()
						}
						out = append(out, s)
					}
				}
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d spans, want %d", len(out), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// traceparents records the W3C traceparent of each request a server got.
type traceparents struct {
	mu  sync.Mutex
	got []string
}

func (p *traceparents) add(v string) {
	p.mu.Lock()
	p.got = append(p.got, v)
	p.mu.Unlock()
}

func (p *traceparents) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// parentID is the span ID a traceparent names (version-trace-span-flags),
// and its trace ID.
func parentID(t *testing.T, tp string) (trace, id string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("traceparent %q is not version-trace-span-flags", tp)
	}
	return parts[1], parts[2]
}

// checkOperation holds the trace of one operation whose first attempt
// failed with 503 and whose second succeeded: one trace, the operation's
// span, two attempt spans under it, the second carrying
// http.request.resend_count=1 and the first error.type=503, and each
// attempt's traceparent the one the server received. It returns the
// operation's span.
func checkOperation(t *testing.T, spans []span, opName string, seen []string) span {
	t.Helper()
	var op *span
	var attempts []span
	for i, s := range spans {
		switch {
		case s.name == opName:
			op = &spans[i]
		case s.scope == "github.com/retryguard/retryguard/runtime/otel":
			attempts = append(attempts, s)
		}
	}
	if op == nil {
		t.Fatalf("no span named %q among %v", opName, names(spans))
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2: %v", len(attempts), names(spans))
	}
	if attempts[0].attrs.AsRaw()["retryguard.attempt"] != int64(1) {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	for i, a := range attempts {
		if a.trace != op.trace {
			t.Errorf("attempt %d is in trace %s, the operation in %s: not one trace", i+1, a.trace, op.trace)
		}
		if a.parent != op.id {
			t.Errorf("attempt %d's parent is %s, want the operation's span %s", i+1, a.parent, op.id)
		}
		if a.name != "POST" && a.name != "GET" || a.kind != ptrace.SpanKindClient {
			t.Errorf("attempt %d is %q (%v), want an HTTP client span named by its method", i+1, a.name, a.kind)
		}
		if v, _ := a.attr("retryguard.attempt"); v.Int() != int64(i+1) {
			t.Errorf("attempt %d: retryguard.attempt = %v", i+1, v.AsRaw())
		}
	}
	first, second := attempts[0], attempts[1]
	if v, ok := first.attr("http.request.resend_count"); ok {
		t.Errorf("the first attempt carries http.request.resend_count=%v; the conventions set it on resends only", v.AsRaw())
	}
	if v, ok := first.attr("error.type"); !ok || v.Str() != "503" {
		t.Errorf("the first attempt's error.type = %v, want 503", v.AsRaw())
	}
	if v, _ := first.attr("retryguard.decision"); v.Str() != "retry" {
		t.Errorf("the first attempt's decision = %q, want retry", v.Str())
	}
	if v, ok := first.attr("retryguard.backoff"); !ok || v.Double() < 0 {
		t.Errorf("the first attempt's backoff = %v", v.AsRaw())
	}
	if first.status != ptrace.StatusCodeError {
		t.Errorf("the first attempt's status = %v, want Error", first.status)
	}
	if v, ok := second.attr("http.request.resend_count"); !ok || v.Int() != 1 {
		t.Errorf("the second attempt's http.request.resend_count = %v, want 1", v.AsRaw())
	}
	if v, ok := second.attr("error.type"); ok {
		t.Errorf("the second attempt succeeded and carries error.type=%v", v.AsRaw())
	}
	if v, _ := second.attr("http.response.status_code"); v.Int() != 200 {
		t.Errorf("the second attempt's http.response.status_code = %v, want 200", v.AsRaw())
	}
	if v, _ := second.attr("retryguard.decision"); v.Str() != "success" {
		t.Errorf("the second attempt's decision = %q, want success", v.Str())
	}
	if v, _ := op.attr("retryguard.attempts"); v.Int() != 2 {
		t.Errorf("the operation's retryguard.attempts = %v, want 2", v.AsRaw())
	}
	if len(seen) != 2 {
		t.Fatalf("the server got %d requests, want 2", len(seen))
	}
	for i, tp := range seen {
		tr, id := parentID(t, tp)
		if tr != op.trace || id != attempts[i].id {
			t.Errorf("request %d carried traceparent %s, want attempt %d's span %s-%s", i+1, tp, i+1, op.trace, attempts[i].id)
		}
	}
	return *op
}

func names(spans []span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.name)
	}
	return out
}
