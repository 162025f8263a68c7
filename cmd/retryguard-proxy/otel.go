package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	retryotel "github.com/retryguard/retryguard/runtime/otel"
	"github.com/retryguard/retryguard/runtime/retry"
)

// The environment variables, the OpenTelemetry SDK's own, that turn the
// sidecar's tracing on and choose its exporter. The exporters read the
// rest themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE and their _TRACES_ forms), as does the SDK (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*).
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envServiceName    = "OTEL_SERVICE_NAME"
	envPropagators    = "OTEL_PROPAGATORS"
)

// serviceName is the sidecar's service.name when OTEL_SERVICE_NAME is unset.
const serviceName = "retryguard-proxy"

// tracing is the sidecar's OpenTelemetry, when the environment asks for it.
type tracing struct {
	provider   *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
}

// startTracing exports the proxy's spans over OTLP when an OTLP endpoint is
// set (OTEL_EXPORTER_OTLP_ENDPOINT or its _TRACES_ form), by the protocol
// the _PROTOCOL variables name (http/protobuf when unset, as the
// specification's default; or grpc). It returns nil, and the proxy traces
// nothing, when neither endpoint is set, when OTEL_TRACES_EXPORTER is
// none, or when OTEL_SDK_DISABLED is true.
func startTracing(ctx context.Context) (*tracing, error) {
	if os.Getenv(envEndpoint) == "" && os.Getenv(envTracesEndpoint) == "" {
		return nil, nil
	}
	if strings.EqualFold(os.Getenv(envSDKDisabled), "true") {
		return nil, nil
	}
	switch e := os.Getenv(envTracesExporter); e {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("%s=%q: the sidecar exports otlp or none", envTracesExporter, e)
	}
	protocolVar := envTracesProtocol // the variable the protocol came from, for the error
	protocol := os.Getenv(envTracesProtocol)
	if protocol == "" {
		protocolVar, protocol = envProtocol, os.Getenv(envProtocol)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: want http/protobuf or grpc", protocolVar, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	var attrs []resource.Option
	if os.Getenv(envServiceName) == "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceName(serviceName)))
	}
	// resource.WithFromEnv comes last: OTEL_RESOURCE_ATTRIBUTES overrides the default name.
	res, err := resource.New(ctx, append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if err != nil {
		return nil, fmt.Errorf("the OpenTelemetry resource: %w", err)
	}
	prop, err := propagator()
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &tracing{provider: tp, propagator: prop}, nil
}

// propagator is how trace context enters from the application and leaves
// with each attempt: OTEL_PROPAGATORS' list as the SDK reads it (autoprop:
// tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace, none), or
// tracecontext and baggage, the specification's default, when unset. A name
// it does not know is an error that names the variable, even beside none
// (autoprop's list stops reading at none, and its own reader of the
// variable would only log an unknown name and fall back).
func propagator() (propagation.TextMapPropagator, error) {
	v := os.Getenv(envPropagators)
	if v == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	names := strings.Split(v, ",")
	for i, name := range names {
		names[i] = strings.TrimSpace(name)
		if names[i] == "none" {
			continue
		}
		if _, err := autoprop.TextMapPropagator(names[i]); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", envPropagators, v, err)
		}
	}
	return autoprop.TextMapPropagator(names...)
}

// option is the executors' Observer.
func (t *tracing) option() (retry.Option, error) {
	obs, err := retryotel.New(retryotel.WithTracerProvider(t.provider), retryotel.WithPropagator(t.propagator))
	if err != nil {
		return nil, err
	}
	return retry.WithObserver(obs), nil
}

// extract continues the application's trace: its request's trace context
// (traceparent) is the parent of the operation's span. The header itself is
// replaced, on each attempt, by the attempt's.
func (t *tracing) extract(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
	})
}

// stop flushes the spans not yet exported.
func (t *tracing) stop(ctx context.Context) { _ = t.provider.Shutdown(ctx) }
