package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/limits"
)

// Defaults of RetryPolicy, applied by the API server and assumed by the
// validators and the runtime when a field is absent. The bounds live in
// package limits, which the payload parser shares.
const (
	DefaultBackoffJitter     = JitterFull
	DefaultBackoffBase       = "100ms"
	DefaultBackoffCap        = "3s"
	DefaultBackoffMultiplier = int32(2)
	DefaultHiddenAttempts    = int32(1)
	DefaultMinRemaining      = "500ms"
	DefaultIdempotencyHeader = "Idempotency-Key"
	DefaultCriticality       = CriticalityStandard
	DefaultHedgeFloor        = "10ms"
	DefaultHedgeCap          = "500ms"
)

// DefaultRetryAfterMaxDelay is the longest Retry-After honoured when
// retryAfter.maxDelay is absent, unless the deadline is shorter: see
// RetryPolicySpec.RetryAfterMaxDelay. It is not a CRD default, so that a
// short deadline that never mentions retryAfter stays valid.
const DefaultRetryAfterMaxDelay = 3 * time.Second

// DefaultRetryOnStatusCodes are the statuses retried when retryOn.statusCodes is absent.
var DefaultRetryOnStatusCodes = []int32{429, 503, 504}

// DefaultRetryOnErrors are the transport errors retried when retryOn.errors is
// absent. Both prove that the request never reached the dependency.
var DefaultRetryOnErrors = []TransportError{ConnectionRefused, DNSFailure}

// JitterMode selects how a backoff delay is randomised.
// +kubebuilder:validation:Enum=Full;Equal;Decorrelated;None
type JitterMode string

const (
	// JitterFull draws uniform(0, min(cap, base·multiplier^n)).
	JitterFull JitterMode = JitterMode(backoff.Full)
	// JitterEqual draws half the window plus uniform(0, half the window).
	JitterEqual JitterMode = JitterMode(backoff.Equal)
	// JitterDecorrelated draws uniform(base, previous·3), capped.
	JitterDecorrelated JitterMode = JitterMode(backoff.Decorrelated)
	// JitterNone exists only so that it can be rejected with ERR_JITTER_REQUIRED.
	JitterNone JitterMode = "None"
)

// TransportError is a failure observed below HTTP.
// +kubebuilder:validation:Enum=ConnectionRefused;ConnectionReset;Timeout;DNSFailure
type TransportError string

const (
	// ConnectionRefused: the connection was refused, so no request was sent.
	ConnectionRefused TransportError = limits.ConnectionRefused
	// ConnectionReset: the connection dropped; the request may have been applied.
	ConnectionReset TransportError = limits.ConnectionReset
	// Timeout: no answer in time; the request may have been applied.
	Timeout TransportError = limits.Timeout
	// DNSFailure: the name did not resolve, so no request was sent.
	DNSFailure TransportError = limits.DNSFailure
)

// IsAmbiguous reports whether the request may have been applied when this
// error was observed, so that replaying it needs an idempotency guarantee.
func (e TransportError) IsAmbiguous() bool { return e == ConnectionReset || e == Timeout }

// Criticality separates callers whose failure domains must not be shared.
// +kubebuilder:validation:Enum=Critical;Standard
type Criticality string

const (
	// CriticalityCritical is for callers such as 2FA dispatch.
	CriticalityCritical Criticality = limits.CriticalityCritical
	// CriticalityStandard is for everything else.
	CriticalityStandard Criticality = limits.CriticalityStandard
)

// RetryTarget names the dependency a policy governs.
type RetryTarget struct {
	// service is the dependency, as a DNS-1123 label (for example telephony-api).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Service string `json:"service,omitempty"`

	// operation is the call this policy covers, for example "POST /v1/messages".
	// When it starts with an HTTP method, that method's RFC 9110 idempotency
	// counts: GET, HEAD, PUT, DELETE, OPTIONS and TRACE may be replayed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Operation *string `json:"operation,omitempty"`
}

// RetryLayer places a policy in the call tree. Attempts multiply across
// layers: three layers of three total attempts make 27 calls at the bottom.
type RetryLayer struct {
	// name of this layer, for example connector, job or workflow.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// parentRef names the RetryPolicy of the calling layer. A parent in
	// another namespace must consent, through its layer.allowedChildren.
	// +optional
	ParentRef *ParentReference `json:"parentRef,omitempty"`

	// allowedChildren says which namespaces may name this policy as their
	// parentRef. A child layer constrains its parent (the parent's attempts
	// multiply into the child's product), so the parent's owner consents to
	// children from other namespaces, as a Gateway consents to routes.
	// Unset allows the policy's own namespace only.
	// +optional
	AllowedChildren *AllowedChildren `json:"allowedChildren,omitempty"`

	// hiddenAttempts counts the attempts a layer Retryguard cannot see makes
	// for each attempt of this policy: an SDK's or a proxy's own retries
	// (Istio retries twice by default, 3 attempts; botocore's standard mode
	// makes 3). It multiplies into the layer product like maxAttempts, but the
	// runtime never makes these attempts itself. From 1 to 10; 1 hides nothing.
	// +optional
	// +default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxHiddenAttempts}",message="ERR_OUT_OF_RANGE: layer.hiddenAttempts must be between 1 and ${limits.MaxHiddenAttempts}"
	HiddenAttempts *int32 `json:"hiddenAttempts,omitempty"`
}

// ParentReference names the RetryPolicy of the calling layer.
type ParentReference struct {
	// name of the parent RetryPolicy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// namespace of the parent RetryPolicy; the policy's own namespace when
	// unset. The parent must allow this namespace in its
	// layer.allowedChildren.namespaces.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace *string `json:"namespace,omitempty"`
}

// BudgetReference names the RetryBudget a policy draws on.
type BudgetReference struct {
	// name of the RetryBudget.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// namespace of the RetryBudget; the policy's own namespace when unset.
	// A budget in another namespace must admit the policy's namespace in
	// its consumers.namespaces (ERR_BUDGET_NOT_SHARED), and it counts the
	// pods of every namespace it admits, so that one budget holds a fleet
	// that spans namespaces.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace *string `json:"namespace,omitempty"`
}

// AllowedChildren is a parent's consent to child layers.
type AllowedChildren struct {
	// namespaces selects the namespaces whose RetryPolicies may name this
	// policy as their parentRef.
	// +optional
	// +default={"from": "Same"}
	Namespaces *AllowedNamespaces `json:"namespaces,omitempty"`
}

// FromNamespaces says which namespaces an AllowedNamespaces admits.
// +kubebuilder:validation:Enum=Same;All;Selector
type FromNamespaces string

// The namespaces an object consents to.
const (
	// NamespacesFromSame: only the object's own namespace.
	NamespacesFromSame FromNamespaces = "Same"
	// NamespacesFromAll: every namespace.
	NamespacesFromAll FromNamespaces = "All"
	// NamespacesFromSelector: the namespaces whose labels match selector.
	NamespacesFromSelector FromNamespaces = "Selector"
)

// AllowedNamespaces is an object's consent to objects of other namespaces,
// as Gateway API's allowedRoutes is: a parent's to child layers
// (layer.allowedChildren.namespaces), a budget's to consumers
// (consumers.namespaces).
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="ERR_INVALID_SELECTOR: namespaces.selector is required when from is Selector, and allowed only then",fieldPath=".selector"
type AllowedNamespaces struct {
	// from is Same (the default: the object's own namespace only), All, or
	// Selector (the namespaces that match selector). The object's own
	// namespace is always allowed.
	// +optional
	// +default="Same"
	From *FromNamespaces `json:"from,omitempty"`

	// selector picks namespaces by their labels when from is Selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Backoff is the delay between attempts.
type Backoff struct {
	// jitter randomises each delay so that callers do not retry in lockstep.
	// Full (the default) draws uniform(0, min(cap, base·multiplier^n)).
	// None is rejected.
	// +optional
	// +default="Full"
	Jitter *JitterMode `json:"jitter,omitempty"`

	// base is the first backoff window. It must be positive.
	// +optional
	// +default="100ms"
	Base *Duration `json:"base,omitempty"`

	// cap is the largest backoff window. It must be at least base.
	// +optional
	// +default="3s"
	Cap *Duration `json:"cap,omitempty"`

	// multiplier grows the window per attempt: base·multiplier^n, from 1 to 10.
	// +optional
	// +default=2
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxBackoffMultiplier}",message="ERR_OUT_OF_RANGE: backoff.multiplier must be between 1 and ${limits.MaxBackoffMultiplier}"
	Multiplier *int32 `json:"multiplier,omitempty"`
}

// RetryAfter governs a server's Retry-After header.
type RetryAfter struct {
	// maxDelay is the longest Retry-After honoured. A longer one fails fast:
	// truncating it would retry before the server said it was ready. When
	// absent it is 3s, or deadline − minRemaining when that is shorter, so
	// that an honoured Retry-After never outlives the operation.
	// +optional
	MaxDelay *Duration `json:"maxDelay,omitempty"`
}

// RetryOn lists the failures that may be retried. Anything else is terminal.
type RetryOn struct {
	// statusCodes are the HTTP statuses retried. Only 429 and 5xx other than
	// 501 and 505 may appear: a 4xx is the caller's fault and retrying burns money.
	// +optional
	// +listType=set
	// +default=[429,503,504]
	// +kubebuilder:validation:MaxItems=16
	// An empty list ([]) retries no status: with errors that prove the
	// request never left, a policy then needs no replay safety (see
	// maxAttempts).
	// +kubebuilder:validation:XValidation:rule="self.all(c, c == 429 || (c >= 500 && c <= 599 && c != 501 && c != 505))",message="ERR_NON_RETRYABLE_STATUS: retryOn.statusCodes may hold only 429 and 5xx other than 501 and 505; other statuses never succeed on retry"
	StatusCodes []int32 `json:"statusCodes,omitzero"`

	// errors are the transport failures retried. ConnectionRefused and
	// DNSFailure prove the request never left, and a retry of them needs no
	// replay safety. ConnectionReset and Timeout are ambiguous: the request
	// may have been applied, and a retry needs an idempotency key or an
	// idempotent method (see maxAttempts).
	// +optional
	// +listType=set
	// +default=["ConnectionRefused","DNSFailure"]
	// +kubebuilder:validation:MaxItems=4
	Errors []TransportError `json:"errors,omitempty"`
}

// Idempotency makes replays safe: every attempt of one logical operation
// carries the same key.
type Idempotency struct {
	// header is the request header that carries the key.
	// +optional
	// +default="Idempotency-Key"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9!#$%&\\'*+.^_|~-]+$')",message="ERR_INVALID_HEADER: idempotency.header must be an HTTP field name: letters, digits and !#$%&'*+.^_|~- only, no space, CR or LF"
	Header *string `json:"header,omitempty"`

	// keyTemplate renders the key once per logical operation from the caller's
	// variables, for example SMS-2FA-{user_id}-{login_session_id}. It needs at
	// least one {placeholder} and no per-attempt value ({attempt}, {random},
	// {uuid}, {now}, {timestamp}).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^([^{}]|[{][A-Za-z_][A-Za-z0-9_]*[}])*$')",message="ERR_INVALID_KEY_TEMPLATE: idempotency.keyTemplate placeholders are {name} with letters, digits and underscores, and braces must pair"
	// +kubebuilder:validation:XValidation:rule="self.matches('[{][A-Za-z_][A-Za-z0-9_]*[}]')",message="ERR_UNSTABLE_IDEMPOTENCY_KEY: idempotency.keyTemplate has no {placeholder}, so every operation would share one key"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)[{](attempt|random|uuid|now|timestamp)[}]')",message="ERR_UNSTABLE_IDEMPOTENCY_KEY: idempotency.keyTemplate uses a per-attempt value ({attempt}, {random}, {uuid}, {now} or {timestamp}), so retries would carry new keys"
	KeyTemplate *string `json:"keyTemplate,omitempty"`
}

// ConnectionPool isolates a caller's connections from other callers'.
type ConnectionPool struct {
	// name of the pool. Policies that share it must share criticality and service.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// maxConnections bounds the pool's connections, from 1 to 1000.
	// +required
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxConnectionsPerPool}",message="ERR_OUT_OF_RANGE: connectionPool.maxConnections must be between 1 and ${limits.MaxConnectionsPerPool}"
	MaxConnections int32 `json:"maxConnections"`
}

// FallbackChannel is where an exhausted operation may be compensated.
// +kubebuilder:validation:XValidation:rule="isURL(self.endpoint) && url(self.endpoint).getScheme() == 'https' && size(url(self.endpoint).getHost()) > 0",message="ERR_UNTESTED_COMPENSATION_BLOCKED: fallback endpoint must be an https:// URL; secrets must not leave on an unencrypted channel",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="has(self.verified) && self.verified",message="ERR_UNTESTED_COMPENSATION_BLOCKED: fallback channel must be verified: true before operations may be routed to it",fieldPath=".verified"
type FallbackChannel struct {
	// name of the channel, for example push-authenticator.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// endpoint is the channel's https:// URL.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// verified records that the channel passed a security review; unverified
	// channels are refused.
	// +optional
	Verified *bool `json:"verified,omitempty"`
}

// Fallback lists the channels an exhausted operation may be routed to.
type Fallback struct {
	// channels in order of preference.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Channels []FallbackChannel `json:"channels,omitempty"`
}

// Events configures lifecycle telemetry.
type Events struct {
	// topic is the Kafka topic for lifecycle events, for example auth.sms.lifecycle.v1.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	Topic *string `json:"topic,omitempty"`
}

// Hedging sends a replay-safe operation again while its attempt is still
// pending, to cut the latency tail. A hedge is an attempt: it asks the
// budget as a retry does (a refused hedge is not sent), carries the
// operation's idempotency key, and counts against maxAttempts and in the
// layer product. The first acceptable answer wins; the others are cancelled.
// Exactly one of delay and latency is set.
// +kubebuilder:validation:XValidation:rule="has(self.delay) != has(self.latency)",message="ERR_OUT_OF_RANGE: hedging needs exactly one of delay and latency"
type Hedging struct {
	// delay is how long an attempt may be pending before a hedge is sent,
	// for example 50ms. It must be positive and below deadline.
	// +optional
	Delay *Duration `json:"delay,omitempty"`

	// latency derives the delay from the policy's own observed latency: the
	// percentile of recent answers, bounded by floor and cap.
	// +optional
	Latency *HedgeLatency `json:"latency,omitempty"`

	// maxHedges is the most hedges one operation sends, from 1 to 2. The
	// attempt and its hedges count together against maxAttempts:
	// 1 + maxHedges must not exceed it.
	// +required
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= ${limits.MaxHedges}",message="ERR_OUT_OF_RANGE: hedging.maxHedges must be between 1 and ${limits.MaxHedges}"
	MaxHedges int32 `json:"maxHedges"`
}

// HedgeLatency is a hedge delay taken from observed latency. Until enough
// answers are observed, the delay is cap.
// +kubebuilder:validation:XValidation:rule="!has(self.floor) || !has(self.cap) || !self.floor.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.cap.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.cap) >= duration(self.floor)",message="ERR_OUT_OF_RANGE: hedging.latency.cap must be at least floor",fieldPath=".cap"
// +kubebuilder:validation:XValidation:rule="!has(self.floor) || !self.floor.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.floor) > duration('0s')",message="ERR_OUT_OF_RANGE: hedging.latency.floor must be positive",fieldPath=".floor"
type HedgeLatency struct {
	// percentile of the observed latency a hedge waits for, from 50 to 99
	// (95 hedges the slowest 5% of attempts).
	// +required
	// +kubebuilder:validation:XValidation:rule="self >= ${limits.MinHedgePercentile} && self <= ${limits.MaxHedgePercentile}",message="ERR_OUT_OF_RANGE: hedging.latency.percentile must be between ${limits.MinHedgePercentile} and ${limits.MaxHedgePercentile}"
	Percentile int32 `json:"percentile"`

	// floor is the shortest delay, whatever the observed latency.
	// +optional
	// +default="10ms"
	Floor *Duration `json:"floor,omitempty"`

	// cap is the longest delay, and the delay until latency is observed.
	// It must be below deadline.
	// +optional
	// +default="500ms"
	Cap *Duration `json:"cap,omitempty"`
}

// RetryPolicySpec is how one layer of one caller retries one dependency.
//
// Its rules sit here, on the spec, even those about one backoff field or
// maxAttempts: the API server evaluates the rules of a spec's fields in map
// order, which varies from request to request, but one object's own rules in
// the order written. Written in field-path order, they make a refusal read
// the same every time.
// +kubebuilder:validation:XValidation:rule="!has(self.backoff) || !has(self.backoff.base) || !self.backoff.base.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.backoff.base) > duration('0s')",message="ERR_JITTER_REQUIRED: backoff.base 0s is an immediate retry; use a positive base such as 100ms",fieldPath=".backoff.base"
// +kubebuilder:validation:XValidation:rule="!has(self.backoff) || !has(self.backoff.base) || !has(self.backoff.cap) || !self.backoff.base.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.backoff.cap.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.backoff.cap) >= duration(self.backoff.base)",message="ERR_BACKOFF_INVALID: backoff.cap must be at least backoff.base",fieldPath=".backoff.cap"
// +kubebuilder:validation:XValidation:rule="!has(self.backoff) || !has(self.backoff.jitter) || self.backoff.jitter != 'None'",message="ERR_JITTER_REQUIRED: backoff.jitter None makes every caller retry in lockstep; use Full, Equal or Decorrelated",fieldPath=".backoff.jitter"
// +kubebuilder:validation:XValidation:rule="self.maxAttempts <= 1 || has(self.budgetRef)",message="ERR_BUDGET_REQUIRED: a policy with maxAttempts above 1 must name a RetryBudget in budgetRef; retries without a budget caused INC-2901",fieldPath=".budgetRef"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || self.maxAttempts > 1 || has(self.budgetRef)",message="ERR_BUDGET_REQUIRED: a hedging policy must name a RetryBudget in budgetRef; every hedge draws from it as a retry does",fieldPath=".budgetRef"
// +kubebuilder:validation:XValidation:rule="!self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.deadline) > duration('0s')",message="ERR_DEADLINE_INFEASIBLE: deadline must be positive",fieldPath=".deadline"
// +kubebuilder:validation:XValidation:rule="self.maxAttempts <= 1 || !has(self.minRemaining) || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.minRemaining.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.deadline) > duration(self.minRemaining)",message="ERR_DEADLINE_INFEASIBLE: deadline must exceed minRemaining, or no retry could ever start",fieldPath=".deadline"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || (has(self.idempotency) && has(self.idempotency.keyTemplate)) || (has(self.target.operation) && self.target.operation.matches('^(GET|HEAD|PUT|DELETE|OPTIONS|TRACE)( |$)'))",message="ERR_HEDGE_WITHOUT_IDEMPOTENCY: only a replay-safe operation may hedge: a hedge duplicates an attempt that may be applied; set idempotency.keyTemplate or use an idempotent method (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) in target.operation",fieldPath=".hedging"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || !has(self.hedging.delay) || !self.hedging.delay.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.hedging.delay) > duration('0s')",message="ERR_OUT_OF_RANGE: hedging.delay must be positive",fieldPath=".hedging.delay"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || !has(self.hedging.delay) || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.hedging.delay.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.hedging.delay) < duration(self.deadline)",message="ERR_DEADLINE_INFEASIBLE: hedging.delay must be below deadline, or no hedge could ever start",fieldPath=".hedging.delay"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || !has(self.hedging.latency) || !has(self.hedging.latency.cap) || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.hedging.latency.cap.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.hedging.latency.cap) < duration(self.deadline)",message="ERR_DEADLINE_INFEASIBLE: hedging.latency.cap must be below deadline, or a hedge could wait past it",fieldPath=".hedging.latency.cap"
// +kubebuilder:validation:XValidation:rule="!has(self.hedging) || self.hedging.maxHedges < self.maxAttempts",message="ERR_RETRY_LIMIT_EXCEEDED: an attempt and its hedges count together against maxAttempts: 1 + hedging.maxHedges must not exceed maxAttempts",fieldPath=".hedging.maxHedges"
// +kubebuilder:validation:XValidation:rule="self.maxAttempts <= 1 || (has(self.idempotency) && has(self.idempotency.keyTemplate)) || (has(self.target.operation) && self.target.operation.matches('^(GET|HEAD|PUT|DELETE|OPTIONS|TRACE)( |$)')) || (has(self.retryOn) && has(self.retryOn.statusCodes) && size(self.retryOn.statusCodes) == 0 && (!has(self.retryOn.errors) || self.retryOn.errors.all(e, e in ['ConnectionRefused', 'DNSFailure'])))",message="ERR_AMBIGUOUS_WITHOUT_IDEMPOTENCY: a policy with maxAttempts above 1 must be safe to replay; set idempotency.keyTemplate, use an idempotent method (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) in target.operation, or retry only failures that prove the request never left (retryOn.statusCodes empty, retryOn.errors only ConnectionRefused and DNSFailure)",fieldPath=".maxAttempts"
// +kubebuilder:validation:XValidation:rule="self.maxAttempts >= 1 && self.maxAttempts <= ${limits.MaxAttemptsCeiling}",message="ERR_RETRY_LIMIT_EXCEEDED: maxAttempts counts total attempts (the first call included) and must be between 1 and ${limits.MaxAttemptsCeiling}",fieldPath=".maxAttempts"
// +kubebuilder:validation:XValidation:rule="!has(self.perAttemptTimeout) || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.perAttemptTimeout.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.perAttemptTimeout) <= duration(self.deadline)",message="ERR_DEADLINE_INFEASIBLE: perAttemptTimeout must not exceed deadline",fieldPath=".perAttemptTimeout"
// +kubebuilder:validation:XValidation:rule="self.maxAttempts <= 1 || !has(self.retryAfter) || !has(self.retryAfter.maxDelay) || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.retryAfter.maxDelay.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.retryAfter.maxDelay) < duration(self.deadline)",message="ERR_DEADLINE_INFEASIBLE: retryAfter.maxDelay must be below deadline, or an honoured Retry-After would outlive the operation",fieldPath=".retryAfter.maxDelay"
type RetryPolicySpec struct {
	// target is the dependency this policy governs.
	// +required
	Target RetryTarget `json:"target,omitzero"`

	// layer places this policy in the call tree.
	// +required
	Layer RetryLayer `json:"layer,omitzero"`

	// maxAttempts is the number of total attempts, the first call included:
	// 3 means one call and at most two retries. From 1 to ${limits.MaxAttemptsCeiling}. Above 1 the
	// operation must be safe to replay (idempotency.keyTemplate is set, or
	// target.operation starts with an idempotent method), or retry only
	// failures that prove the request never left: retryOn.statusCodes is
	// empty and retryOn.errors lists only ConnectionRefused and DNSFailure.
	// +required
	MaxAttempts int32 `json:"maxAttempts"`

	// backoff is the delay between attempts. Each absent field takes its
	// default: Full jitter, base 100ms, cap 3s, multiplier 2. A
	// single-attempt policy never waits, so it needs none.
	// +optional
	// +default={}
	Backoff *Backoff `json:"backoff,omitempty"`

	// deadline is the end-to-end deadline of one logical operation; attempts
	// spend it, they do not reset it.
	// +required
	Deadline Duration `json:"deadline"`

	// minRemaining is the reserve: no retry starts when the remaining deadline
	// is at or below it.
	// +optional
	// +default="500ms"
	MinRemaining *Duration `json:"minRemaining,omitempty"`

	// perAttemptTimeout bounds each attempt; it is also the expected cost of
	// an attempt when deciding whether a retry still fits the deadline.
	// +optional
	PerAttemptTimeout *Duration `json:"perAttemptTimeout,omitempty"`

	// retryAfter governs the server's Retry-After header.
	// +optional
	// +default={}
	RetryAfter *RetryAfter `json:"retryAfter,omitempty"`

	// retryOn lists the failures that may be retried.
	// +optional
	// +default={}
	RetryOn *RetryOn `json:"retryOn,omitempty"`

	// idempotency makes replays safe.
	// +optional
	// +default={}
	Idempotency *Idempotency `json:"idempotency,omitempty"`

	// budgetRef names the RetryBudget that every retry draws from, in the
	// policy's namespace unless namespace says otherwise. Required when
	// maxAttempts is above 1.
	// +optional
	BudgetRef *BudgetReference `json:"budgetRef,omitempty"`

	// hedging sends a replay-safe operation again while its attempt is
	// pending; each hedge is an attempt, paid for from budgetRef. Absent, no
	// operation hedges.
	// +optional
	Hedging *Hedging `json:"hedging,omitempty"`

	// connectionPool isolates this caller's connections.
	// +optional
	ConnectionPool *ConnectionPool `json:"connectionPool,omitempty"`

	// criticality separates failure domains: Critical and Standard callers may
	// share neither a pool nor a budget.
	// +optional
	// +default="Standard"
	Criticality *Criticality `json:"criticality,omitempty"`

	// fallback lists where exhausted operations may be compensated.
	// +optional
	Fallback *Fallback `json:"fallback,omitempty"`

	// events configures lifecycle telemetry.
	// +optional
	Events *Events `json:"events,omitempty"`
}

// RetryPolicyStatus is the observed state of a RetryPolicy.
type RetryPolicyStatus struct {
	// conditions report whether the policy is in force; the Ready condition's
	// reason says why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// observedGeneration is the generation last published successfully; 0
	// until the controller first publishes the policy.
	// +optional
	// +default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// leafAttempts is the product of maxAttempts along the parentRef chain: the
	// calls the dependency can receive for one top-level operation.
	// +optional
	LeafAttempts int32 `json:"leafAttempts,omitempty"`

	// worstCaseDuration is the longest schedule: every attempt plus every
	// maximum backoff, bounded by the deadline.
	// +optional
	WorstCaseDuration *Duration `json:"worstCaseDuration,omitempty"`

	// configMapName is the ConfigMap the policy is published in.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// hiddenLayers are the layers that retry for this policy unseen by the
	// runtime, each multiplied into leafAttempts: layer.hiddenAttempts, and
	// the Istio VirtualServices, of any namespace, that route target.service
	// for this namespace's sidecars.
	// +optional
	// +listType=map
	// +listMapKey=source
	// +kubebuilder:validation:MaxItems=16
	HiddenLayers []HiddenLayer `json:"hiddenLayers,omitempty"`
}

// HiddenLayer is a layer of attempts the runtime cannot see.
type HiddenLayer struct {
	// source names the hidden layer: "spec.layer.hiddenAttempts",
	// "VirtualService/<name>", or "VirtualService/<namespace>/<name>" for one
	// in another namespace (15 + 63 + 1 + 253 characters at most).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=332
	Source string `json:"source,omitempty"`

	// attempts the hidden layer makes for each call it is given, the first
	// included.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempts int32 `json:"attempts,omitempty"`
}

// RetryPolicy is how one layer of one caller retries one dependency.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rp,categories=retryguard
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.target.service`
// +kubebuilder:printcolumn:name="Layer",type=string,JSONPath=`.spec.layer.name`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.spec.maxAttempts`
// +kubebuilder:printcolumn:name="Leaf",type=integer,JSONPath=`.status.leafAttempts`
// +kubebuilder:printcolumn:name="Budget",type=string,JSONPath=`.spec.budgetRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="WorstCase",type=string,priority=1,JSONPath=`.status.worstCaseDuration`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RetryPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired retry behaviour.
	// +required
	Spec RetryPolicySpec `json:"spec,omitzero"`

	// status is the observed state. It defaults to observedGeneration 0, so
	// that a policy the controller has not yet observed reads as in
	// progress, never as current (docs/status.md).
	// +optional
	// +default={}
	Status RetryPolicyStatus `json:"status,omitzero"`
}

// RetryPolicyList is a list of RetryPolicy.
//
// +kubebuilder:object:root=true
type RetryPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RetryPolicy `json:"items"`
}
