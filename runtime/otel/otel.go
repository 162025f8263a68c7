// Package retryotel traces and meters Retryguard's operations with
// OpenTelemetry: a retry.Observer that gives every logical operation a span,
// every attempt a child span (an HTTP client span per the semantic
// conventions for a request sent through retry.RoundTripper, with
// http.request.resend_count on each resend), the attempt's trace context
// to the dependency (the RoundTripper's request header, runtime/grpc's
// metadata), and two metrics beside the runtime's Prometheus ones. It is a
// module of its own, so that the runtime takes no OpenTelemetry dependency.
//
//	obs, err := retryotel.New() // the global TracerProvider, MeterProvider and propagator
//	ex := retry.New(policies, retry.WithObserver(obs))
//	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: "ledger-read"}}
//
// docs/metrics.md, "Tracing", lists the spans' attributes.
package retryotel

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryguard/retryguard/runtime/retry"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/retryguard/retryguard/runtime/otel"

// The attributes Retryguard adds to the semantic conventions' own
// (http.request.resend_count, error.type, http.request.method, ...).
const (
	// PolicyKey is the policy's name, on both spans and both metrics.
	PolicyKey = attribute.Key("retryguard.policy")
	// AttemptKey is the attempt's number, from 1.
	AttemptKey = attribute.Key("retryguard.attempt")
	// DecisionKey is what followed the attempt: retry.AttemptOutcome's
	// values (success, retry, stop, cancelled, superseded).
	DecisionKey = attribute.Key("retryguard.decision")
	// ReasonKey is why no retry followed (retryguard_retries_denied_total's
	// reason label), with DecisionKey stop.
	ReasonKey = attribute.Key("retryguard.reason")
	// CodeKey is the ERR_ code the operation ended with.
	CodeKey = attribute.Key("retryguard.code")
	// BackoffKey is the wait before the next attempt, in seconds, with
	// DecisionKey retry.
	BackoffKey = attribute.Key("retryguard.backoff")
	// ClassKey is the classification of a failed attempt (transient,
	// ambiguous, permanent, unrecognized).
	ClassKey = attribute.Key("retryguard.class")
	// StateKey is the operation's final lifecycle state.
	StateKey = attribute.Key("retryguard.state")
	// AttemptsKey is how many attempts the operation made.
	AttemptsKey = attribute.Key("retryguard.attempts")
)

// The metrics' names. No semantic convention covers retries; these follow
// the conventions' naming rules (dot-separated, the unit not in the name).
const (
	AttemptsMetric          = "retryguard.attempts"
	OperationDurationMetric = "retryguard.operation.duration"
)

// DefaultDurationBoundaries are OperationDurationMetric's bucket bounds in
// seconds: those the semantic conventions advise for HTTP request
// durations (http.client.request.duration).
var DefaultDurationBoundaries = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Option configures an Observer.
type Option func(*config)

type config struct {
	tp         trace.TracerProvider
	mp         metric.MeterProvider
	propagator propagation.TextMapPropagator
	boundaries []float64
}

// WithTracerProvider sets the TracerProvider spans are made by; the global
// one (otel.GetTracerProvider) by default.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the MeterProvider the metrics are recorded by;
// the global one (otel.GetMeterProvider) by default.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets how an attempt's trace context travels to the
// dependency; by default the global propagator, read at each attempt, so
// that one set later with otel.SetTextMapPropagator is used.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithDurationBoundaries sets OperationDurationMetric's bucket bounds, in
// seconds (DefaultDurationBoundaries by default).
func WithDurationBoundaries(b []float64) Option { return func(c *config) { c.boundaries = b } }

// Observer is the retry.Observer that traces and meters operations. It is
// safe for concurrent use; one serves any number of executors.
type Observer struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator // nil: the global one
	attempts   metric.Int64Counter
	duration   metric.Float64Histogram
}

var _ retry.Observer = (*Observer)(nil)

// New returns an Observer; the error is the MeterProvider's, for an
// instrument it refused.
func New(opts ...Option) (*Observer, error) {
	c := config{boundaries: DefaultDurationBoundaries}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	o := &Observer{tracer: c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)), propagator: c.propagator}
	meter := c.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	if o.attempts, err = meter.Int64Counter(AttemptsMetric, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of logical operations, by policy and what followed them (retry, stop, success, ...).")); err != nil {
		return nil, err
	}
	if o.duration, err = meter.Float64Histogram(OperationDurationMetric, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(c.boundaries...),
		metric.WithDescription("Time from a logical operation's start to its final state, backoff included.")); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Observer) prop() propagation.TextMapPropagator {
	if o.propagator != nil {
		return o.propagator
	}
	return otel.GetTextMapPropagator()
}

// operation is what the Observer keeps in an operation's context.
type operation struct {
	policy string
	req    *http.Request // the RoundTripper's, or nil
	start  time.Time
}

type operationKey struct{}

// attemptKey holds an attempt's number in its context.
type attemptKey struct{}

func operationOf(ctx context.Context) *operation {
	op, _ := ctx.Value(operationKey{}).(*operation)
	if op == nil {
		return &operation{}
	}
	return op
}

// StartOperation starts the operation's span, an internal one named
// "retryguard <policy>", a child of ctx's span.
func (o *Observer) StartOperation(ctx context.Context, policy string, req *http.Request) context.Context {
	ctx = context.WithValue(ctx, operationKey{}, &operation{policy: policy, req: req, start: time.Now()})
	ctx, _ = o.tracer.Start(ctx, "retryguard "+policy, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(PolicyKey.String(policy)))
	return ctx
}

// StartAttempt starts the attempt's span, a child of the operation's: for
// the RoundTripper's request an HTTP client span named by its method, with
// the semantic conventions' request attributes; otherwise an internal span
// named "retryguard attempt".
func (o *Observer) StartAttempt(ctx context.Context, a retry.Attempt) context.Context {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, PolicyKey.String(a.Policy), AttemptKey.Int(a.Number))
	if a.Number > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(a.Number-1))
	}
	name, kind := "retryguard attempt", trace.SpanKindInternal
	if req := operationOf(ctx).req; req != nil {
		name, kind = methodName(req.Method), trace.SpanKindClient
		attrs = append(attrs, requestAttributes(req)...)
	}
	ctx, _ = o.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx
}

// Decision is what followed an attempt, DecisionKey's value.
func Decision(r retry.AttemptRecord, d retry.Decision) string {
	switch {
	case d.Next == retry.Dispatched:
		return "success"
	case d.Retry():
		return "retry"
	case d.Next == retry.Attempting && r.Evidence.Class == "":
		return "cancelled" // a hedge in flight when another succeeded
	case d.Next == retry.Attempting:
		return "superseded" // a hedge that failed beside the attempt decided on
	}
	return "stop"
}

// EndAttempt ends the attempt's span with what followed it, and counts the
// attempt.
func (o *Observer) EndAttempt(ctx context.Context, r retry.AttemptRecord, d retry.Decision) {
	span := trace.SpanFromContext(ctx)
	decision := Decision(r, d)
	op := operationOf(ctx)
	attrs := []attribute.KeyValue{DecisionKey.String(decision)}
	if r.Evidence.Status > 0 && op.req != nil {
		// Only the RoundTripper's attempts received an HTTP response: an
		// Operation's status may be a mapping (runtime/grpc's UNAVAILABLE is 503).
		attrs = append(attrs, semconv.HTTPResponseStatusCode(r.Evidence.Status))
	}
	errType := errorType(r, decision)
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType), ClassKey.String(string(r.Evidence.Class)))
		span.SetStatus(otelcodes.Error, errType)
	}
	switch decision {
	case "retry":
		attrs = append(attrs, BackoffKey.Float64(d.Sleep.Seconds()))
	case "stop":
		attrs = append(attrs, ReasonKey.String(d.Reason), CodeKey.String(string(d.Code)))
	}
	span.SetAttributes(attrs...)
	span.End()
	counted := []attribute.KeyValue{PolicyKey.String(op.policy), DecisionKey.String(decision)}
	if errType != "" {
		counted = append(counted, semconv.ErrorTypeKey.String(errType))
	}
	o.attempts.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(counted...))
}

// EndOperation ends the operation's span and records its duration.
func (o *Observer) EndOperation(ctx context.Context, attempts int, err error) {
	op := operationOf(ctx)
	state, code := retry.Dispatched, ""
	var re *retry.Error
	if errors.As(err, &re) {
		state, code = re.State, string(re.Code)
	}
	span := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{AttemptsKey.Int(attempts)}
	measured := []attribute.KeyValue{PolicyKey.String(op.policy)}
	if state != "" { // "": refused before its first attempt (its key), it never entered the state machine
		attrs = append(attrs, StateKey.String(string(state)))
		measured = append(measured, StateKey.String(string(state)))
	}
	if code != "" {
		attrs = append(attrs, CodeKey.String(code), semconv.ErrorTypeKey.String(code))
		measured = append(measured, semconv.ErrorTypeKey.String(code))
		span.SetStatus(otelcodes.Error, code)
	}
	span.SetAttributes(attrs...)
	span.End()
	if !op.start.IsZero() {
		o.duration.Record(context.WithoutCancel(ctx), time.Since(op.start).Seconds(), metric.WithAttributes(measured...))
	}
}

// Inject puts the attempt's trace context into h through the propagator.
func (o *Observer) Inject(ctx context.Context, h http.Header) {
	o.prop().Inject(ctx, propagation.HeaderCarrier(h))
}

// errorType is the attempt's error.type: the status code for an HTTP
// status (as the semantic conventions say), the transport failure's name,
// or the class; "" for an attempt that did not fail.
func errorType(r retry.AttemptRecord, decision string) string {
	switch {
	case decision == "success" || decision == "cancelled":
		return ""
	case r.Evidence.Status >= 400:
		return strconv.Itoa(r.Evidence.Status)
	case r.Evidence.Transport != "":
		return r.Evidence.Transport
	case r.Evidence.Class != "":
		return string(r.Evidence.Class)
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// knownMethods are the methods the semantic conventions name a span by;
// any other is _OTHER, so that span names stay a bounded set.
var knownMethods = map[string]bool{http.MethodConnect: true, http.MethodDelete: true, http.MethodGet: true, http.MethodHead: true,
	http.MethodOptions: true, http.MethodPatch: true, http.MethodPost: true, http.MethodPut: true, http.MethodTrace: true}

func methodName(m string) string {
	if m == "" {
		return http.MethodGet
	}
	if knownMethods[m] {
		return m
	}
	return "HTTP"
}

// requestAttributes are the semantic conventions' HTTP client attributes
// of req. url.full carries no user info and no query: a query may hold a
// credential, which a trace must not.
func requestAttributes(req *http.Request) []attribute.KeyValue {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	var out []attribute.KeyValue
	if knownMethods[method] {
		out = append(out, semconv.HTTPRequestMethodKey.String(method))
	} else {
		out = append(out, semconv.HTTPRequestMethodOther, attribute.String("http.request.method_original", method))
	}
	u := req.URL
	if u == nil {
		return out
	}
	host, port := u.Hostname(), u.Port()
	out = append(out, semconv.ServerAddress(host), semconv.URLScheme(u.Scheme))
	if p, err := strconv.Atoi(port); err == nil {
		out = append(out, semconv.ServerPort(p))
	} else if p := defaultPort(u.Scheme); p > 0 {
		out = append(out, semconv.ServerPort(p))
	}
	full := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	out = append(out, semconv.URLFull(full.String()))
	return out
}

func defaultPort(scheme string) int {
	switch strings.ToLower(scheme) {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}
