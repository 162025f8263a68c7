package main

import (
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Without an OTLP endpoint the sidecar traces nothing; with one, what the
// SDK's variables say, and a protocol it cannot speak is an error that
// names the variable.
func TestTracingFollowsTheSDKsVariables(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		tracing bool
		err     string
	}{
		{name: "unset", env: map[string]string{}},
		{name: "endpoint", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, tracing: true},
		{name: "traces endpoint, grpc", env: map[string]string{envTracesEndpoint: "http://127.0.0.1:4317", envTracesProtocol: "grpc"}, tracing: true},
		{name: "exporter none", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "none"}},
		{name: "sdk disabled", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "true"}},
		{name: "json", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envProtocol: "http/json"}, err: envProtocol},
		{name: "traces json", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesProtocol: "http/json"}, err: envTracesProtocol},
		{name: "zipkin", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "zipkin"}, err: envTracesExporter},
		{name: "b3 propagation", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envPropagators: "b3"}, tracing: true},
		{name: "an unknown propagator", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envPropagators: "tracecontext,w3c"}, err: envPropagators},
		{name: "an unknown propagator beside none", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envPropagators: "w3c,none"}, err: envPropagators},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol, envTracesExporter, envSDKDisabled, envPropagators} {
				t.Setenv(k, tc.env[k])
			}
			tr, err := startTracing(t.Context())
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if (tr != nil) != tc.tracing {
				t.Fatalf("tracing = %t, want %t", tr != nil, tc.tracing)
			}
			if tr != nil {
				tr.stop(t.Context())
			}
		})
	}
}

// The trace context leaves with each attempt in the headers OTEL_PROPAGATORS
// names, tracecontext and baggage when it is unset, and in none with none.
func TestThePropagatorFollowsOTELPropagators(t *testing.T) {
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled,
	}))
	for value, want := range map[string][]string{
		"":                 {"Traceparent"},
		"b3":               {"B3"},
		"b3multi,baggage":  {"X-B3-Traceid", "X-B3-Spanid", "X-B3-Sampled"},
		"tracecontext, b3": {"Traceparent", "B3"},
		"none":             nil,
		"jaeger":           {"Uber-Trace-Id"},
	} {
		t.Run(value, func(t *testing.T) {
			t.Setenv(envPropagators, value)
			p, err := propagator()
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			p.Inject(ctx, propagation.HeaderCarrier(h))
			if len(h) != len(want) {
				t.Errorf("injected %v, want exactly %v", h, want)
			}
			for _, k := range want {
				if h.Get(k) == "" {
					t.Errorf("no %s header: %v", k, h)
				}
			}
		})
	}
}
