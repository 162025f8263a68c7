// Package limits holds the bounds and name shapes of Retryguard's API, once:
// the CRD's CEL rules name them (${limits.Name}, which make manifests writes
// into the generated CRD), and the Go validators and the payload parser
// import them, so that admission and the pods refuse the same values. It
// imports nothing.
package limits

import "time"

// RetryPolicy bounds.
const (
	// MaxAttemptsCeiling is the most total attempts a policy may allow
	// (INV-RTY-01: one call and at most two retries).
	MaxAttemptsCeiling = int32(3)
	// MaxBackoffMultiplier bounds backoff.multiplier (1 to 10).
	MaxBackoffMultiplier = int32(10)
	// MaxRetryOnStatusCodes bounds retryOn.statusCodes.
	MaxRetryOnStatusCodes = 16
	// MaxRetryOnErrors bounds retryOn.errors (there are four transport errors).
	MaxRetryOnErrors = 4
	// MaxFallbackChannels bounds fallback.channels.
	MaxFallbackChannels = 8
	// MaxKeyTemplateLength bounds idempotency.keyTemplate.
	MaxKeyTemplateLength = 256
	// MaxHeaderLength bounds idempotency.header.
	MaxHeaderLength = 128
	// MaxOperationLength bounds target.operation.
	MaxOperationLength = 256
	// MaxDNSLabelLength bounds service, layer, pool and channel names.
	MaxDNSLabelLength = 63
	// MaxObjectNameLength bounds the name of a referenced object.
	MaxObjectNameLength = 253
	// MaxFallbackEndpointLength bounds a fallback endpoint URL.
	MaxFallbackEndpointLength = 2048
	// MaxEventsTopicLength bounds events.topic (Kafka's limit).
	MaxEventsTopicLength = 249
	// MaxHiddenAttempts bounds layer.hiddenAttempts. The hidden retriers in
	// practice make 2 to 5 attempts (Istio 3, botocore standard 3, legacy 5,
	// adaptive up to 5); 10 leaves room for an unusual SDK while keeping the
	// product of a 32-deep chain of such layers far from overflow.
	MaxHiddenAttempts = int32(10)
	// MaxHiddenLayers bounds status.hiddenLayers: hiddenAttempts and the
	// mesh routes the controller found.
	MaxHiddenLayers = 16
	// MaxHedges bounds hedging.maxHedges: an attempt and its hedges count
	// together against maxAttempts, so no more than MaxAttemptsCeiling − 1.
	MaxHedges = MaxAttemptsCeiling - 1
	// MinHedgePercentile and MaxHedgePercentile bound hedging.latency.percentile.
	MinHedgePercentile = int32(50)
	MaxHedgePercentile = int32(99)
	// MaxConnectionsPerPool bounds connectionPool.maxConnections.
	MaxConnectionsPerPool = int32(1000)
)

// RetryBudget bounds.
const (
	MaxBudgetRetryPercent        = int32(100)
	MinBudgetWindow              = time.Second
	MaxBudgetWindow              = time.Hour
	MaxBudgetTokens              = int32(1000)
	MaxBudgetMinRetriesPerSecond = int32(10000)
	MaxBudgetPartitions          = int32(1000)
	MaxBudgetRetriesPerSecond    = int32(100000)
	// MaxUIDLength bounds an object's UID as a payload carries it: the API
	// server assigns 36-byte UUIDs.
	MaxUIDLength = 128
)

// MaxPlatformLeafAttempts bounds the manager's --max-leaf-attempts: the
// largest product of maxAttempts along a parentRef chain a platform may
// allow. The platform's --max-retry-percent is bounded by
// MaxBudgetRetryPercent, as no budget may go above it.
const MaxPlatformLeafAttempts = int64(1000)

// MaxIdempotencyKeyLength is the longest rendered idempotency key, in
// bytes. Keys are sent in a header and stored by the dependency for
// deduplication; 255 is the limit common to payment and messaging APIs'
// idempotency keys.
const MaxIdempotencyKeyLength = 255

// MaxConfigMapBytes is the most a ConfigMap's data may hold: the API server
// refuses a larger one (corev1.MaxSecretSize, which ConfigMap validation
// applies too). A published payload is one ConfigMap key, so a mounted file
// above it was not written by kubelet from a ConfigMap, and a pod refuses it
// unread (docs/security.md, mounted ConfigMaps).
const MaxConfigMapBytes = 1 << 20

// Name shapes the CRD's patterns and the API server enforce.
const (
	// DNS1123LabelPattern: service, pool and namespace names.
	DNS1123LabelPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// DNS1123SubdomainPattern: object names such as a RetryPolicy's.
	DNS1123SubdomainPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// EventsTopicPattern: a Kafka topic name.
	EventsTopicPattern = `^[A-Za-z0-9._-]+$`
)
