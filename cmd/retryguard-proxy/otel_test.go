package main

import (
	"strings"
	"testing"
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol, envTracesExporter, envSDKDisabled} {
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
