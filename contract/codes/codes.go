// Package codes holds Retryguard's stable error codes. Every rejection the API
// server, the admission webhooks or the in-pod runtime produces begins with one
// of them, so that alerts, runbooks and client code can match on the code
// instead of on prose. The package has no dependencies so that any layer can
// import it.
package codes

// Code is a stable, machine-readable error code such as ERR_RETRY_LIMIT_EXCEEDED.
type Code string

// Policy-shape codes: single-object rules that CEL and the Go validators share.
const (
	// RetryLimitExceeded: maxAttempts outside 1–3, or a caller over its attempt limit.
	RetryLimitExceeded Code = "ERR_RETRY_LIMIT_EXCEEDED"
	// JitterRequired: jitter None, or a zero base delay (an immediate retry).
	JitterRequired Code = "ERR_JITTER_REQUIRED"
	// BackoffInvalid: the backoff cap is below its base.
	BackoffInvalid Code = "ERR_BACKOFF_INVALID"
	// NonRetryableStatus: retryOn names a status that must never be retried.
	NonRetryableStatus Code = "ERR_NON_RETRYABLE_STATUS"
	// BudgetRequired: a policy that retries names no RetryBudget.
	BudgetRequired Code = "ERR_BUDGET_REQUIRED"
	// AmbiguousWithoutIdempotency: retrying an ambiguous failure of a
	// non-idempotent operation without an idempotency key.
	AmbiguousWithoutIdempotency Code = "ERR_AMBIGUOUS_WITHOUT_IDEMPOTENCY"
	// HedgeWithoutIdempotency: hedging an operation that is not safe to
	// replay (no idempotency key template and no idempotent method): a hedge
	// duplicates an attempt that may already be applied.
	HedgeWithoutIdempotency Code = "ERR_HEDGE_WITHOUT_IDEMPOTENCY"
	// UnstableIdempotencyKey: a key template that is constant or changes per attempt.
	UnstableIdempotencyKey Code = "ERR_UNSTABLE_IDEMPOTENCY_KEY"
	// InvalidHeader: an idempotency header that is not an HTTP field name.
	InvalidHeader Code = "ERR_INVALID_HEADER"
	// InvalidKeyTemplate: a key template that does not parse.
	InvalidKeyTemplate Code = "ERR_INVALID_KEY_TEMPLATE"
	// DeadlineInfeasible: the deadline cannot hold a retry as configured.
	DeadlineInfeasible Code = "ERR_DEADLINE_INFEASIBLE"
	// UntestedCompensationBlocked: a fallback channel that is not https or not verified.
	UntestedCompensationBlocked Code = "ERR_UNTESTED_COMPENSATION_BLOCKED"
	// OutOfRange: a numeric or duration field outside its documented range.
	OutOfRange Code = "ERR_OUT_OF_RANGE"
	// InvalidSelector: a label selector that is malformed, or set where it
	// means nothing (allowedChildren.namespaces.selector without from: Selector).
	InvalidSelector Code = "ERR_INVALID_SELECTOR"
	// InvalidDuration: a duration that does not parse.
	InvalidDuration Code = "ERR_INVALID_DURATION"
)

// Cross-object codes: rules that need other objects, checked by the webhooks
// and re-checked by the controllers.
const (
	// PublishedConfigMapReserved: a write to a published ConfigMap (the
	// managed-by label, or a retrypolicy-* name) by anyone but the operator,
	// refused by the ValidatingAdmissionPolicy in config/vap and the chart.
	PublishedConfigMapReserved Code = "ERR_PUBLISHED_CONFIGMAP_RESERVED"
	// WebhookConfigurationReserved: a write by the manager to its own
	// webhook configuration that changes anything but a caBundle, refused by
	// the ValidatingAdmissionPolicy in config/components/cert-rotation and
	// the chart.
	WebhookConfigurationReserved Code = "ERR_WEBHOOK_CONFIGURATION_RESERVED"
	// LayerAmplification: the attempt product along a parentRef chain is above the limit.
	LayerAmplification Code = "ERR_LAYER_AMPLIFICATION"
	// ParentNotPermitted: a parentRef names a policy in another namespace
	// whose layer.allowedChildren does not allow the child's namespace.
	ParentNotPermitted Code = "ERR_PARENT_NOT_PERMITTED"
	// BudgetNotShared: a budgetRef names a RetryBudget in another namespace
	// whose consumers.namespaces does not admit the policy's namespace.
	BudgetNotShared Code = "ERR_BUDGET_NOT_SHARED"
	// LayerCycle: a parentRef chain loops back on itself.
	LayerCycle Code = "ERR_LAYER_CYCLE"
	// SharedFailureDomainLeak: a pool or budget shared across criticalities or services.
	SharedFailureDomainLeak Code = "ERR_SHARED_FAILURE_DOMAIN_LEAK"
	// BudgetAbovePlatformCap: retryPercent above the platform's cap.
	BudgetAbovePlatformCap Code = "ERR_BUDGET_ABOVE_PLATFORM_CAP"
	// AdmissionBusy: the webhook could not judge a review in time (every
	// turn was taken, or the review spent its budget), so it refused it;
	// nothing was stored, and the same request may be sent again.
	AdmissionBusy Code = "ERR_ADMISSION_BUSY"
)

// Runtime codes: why the in-pod runtime refused another attempt.
const (
	// DeadlineExceeded: the remaining deadline cannot hold the wait and the next attempt.
	DeadlineExceeded Code = "ERR_DEADLINE_EXCEEDED"
	// RetryBudgetExhausted: the retry budget has no token, or the ratio cap is reached.
	RetryBudgetExhausted Code = "ERR_RETRY_BUDGET_EXHAUSTED"
	// RetryAfterTooLong: the server asked for a longer wait than retryAfter.maxDelay.
	RetryAfterTooLong Code = "ERR_RETRY_AFTER_TOO_LONG"
	// PermanentFailure: the dependency answered with a failure that retrying cannot fix.
	PermanentFailure Code = "ERR_PERMANENT_FAILURE"
	// UnknownOutcome: the request may have been applied and cannot be safely replayed.
	UnknownOutcome Code = "ERR_UNKNOWN_OUTCOME"
	// MissingKeyVariable: the key template names a variable the caller did not supply.
	MissingKeyVariable Code = "ERR_MISSING_KEY_VARIABLE"
	// PolicyNotEnforced: the policy is unknown or published as NoRetry.
	PolicyNotEnforced Code = "ERR_POLICY_NOT_ENFORCED"
)

// Proxy codes: retryguard-proxy's route table (docs/proxy.md).
const (
	// InvalidRoute: a route table entry the proxy cannot serve (a port, prefix, policy or upstream, or the upstreams' CAs).
	InvalidRoute Code = "ERR_INVALID_ROUTE"
	// NoRoute: a request to the proxy that no route of its table matches.
	NoRoute Code = "ERR_NO_ROUTE"
	// UnroutableRequest: a request the proxy refuses to route because its
	// route could be misread: a path with dot-segments or encoded
	// separators, a CONNECT, a protocol upgrade.
	UnroutableRequest Code = "ERR_UNROUTABLE_REQUEST"
	// ProxyBusy: the route already holds its most requests in flight.
	ProxyBusy Code = "ERR_PROXY_BUSY"
	// InjectionUnsafe: a pod the proxy injector cannot make safe (host
	// namespaces, or a container of the sidecar's name that is not the one
	// the injector writes): refused, never injected.
	InjectionUnsafe Code = "ERR_INJECTION_UNSAFE"
)

// String returns the code itself.
func (c Code) String() string { return string(c) }

// Message prefixes a human explanation with the code, the form every
// Retryguard message takes: "ERR_X: what is wrong and why".
func (c Code) Message(text string) string { return string(c) + ": " + text }
