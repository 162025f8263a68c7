// Package policyconfig is the contract between Retryguard's controllers and
// the in-pod runtime: the payload a published ConfigMap carries. The
// controllers Marshal it; pods Parse it. It imports neither controller-runtime
// nor client-go, so any program can read a policy.
//
// A payload is self-contained: the policy, its budget resolved and inlined
// (name and generation included), and an enforcement verdict. A pod that
// cannot trust a payload makes exactly one attempt: fail closed, never open.
// docs/configmap-format.md documents the format.
package policyconfig

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// SchemaVersion identifies this payload format. Parse rejects any other.
const SchemaVersion = "policy.retryguard.io/payload/v1"

// The ConfigMap that carries a payload.
const (
	// DataKey is the ConfigMap data key holding the JSON payload.
	DataKey = "policy.json"
	// PolicyLabel selects published ConfigMaps; its value is the policy's name.
	PolicyLabel = "policy.retryguard.io/policy"
	// ManagedByLabel and ManagedByValue mark ConfigMaps the controllers own.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "retryguard"
	// ContentHashAnnotation holds the SHA-256 of the payload bytes.
	ContentHashAnnotation = "policy.retryguard.io/content-hash"
	// ConfigMapPrefix starts every published ConfigMap's name.
	ConfigMapPrefix = "retrypolicy-"
	// OwnerAPIVersion and OwnerKind identify the controller owner reference
	// every published ConfigMap carries: the RetryPolicy it publishes.
	OwnerAPIVersion = "policy.retryguard.io/v1alpha1"
	OwnerKind       = "RetryPolicy"
)

// ConfigMapName is the name of the ConfigMap a policy is published in.
func ConfigMapName(policy string) string { return ConfigMapPrefix + policy }

// Mode says whether pods may retry under a payload.
type Mode string

const (
	// Enforced: retry as the policy says.
	Enforced Mode = "Enforced"
	// NoRetry: make exactly one attempt; Reason says why.
	NoRetry Mode = "NoRetry"
)

// Enforcement is the controller's verdict on a policy.
type Enforcement struct {
	Mode Mode `json:"mode"`
	// Reason is a CamelCase word, the Ready condition's reason (NoRetry only).
	Reason string `json:"reason,omitempty"`
	// Message explains the reason to a human.
	Message string `json:"message,omitempty"`
}

// Payload is what one published ConfigMap carries.
type Payload struct {
	SchemaVersion string      `json:"schemaVersion"`
	Policy        Policy      `json:"policy"`
	Budget        *Budget     `json:"budget,omitempty"`
	Enforcement   Enforcement `json:"enforcement"`
}

// Policy is a RetryPolicy's spec, defaults applied, as pods need it.
type Policy struct {
	Namespace          string            `json:"namespace"`
	Name               string            `json:"name"`
	Generation         int64             `json:"generation"`
	Service            string            `json:"service"`
	Operation          string            `json:"operation,omitempty"`
	Layer              string            `json:"layer"`
	Parent             string            `json:"parent,omitempty"`
	MaxAttempts        int32             `json:"maxAttempts"`
	LeafAttempts       int32             `json:"leafAttempts"`
	Backoff            Backoff           `json:"backoff"`
	Deadline           Duration          `json:"deadline"`
	MinRemaining       Duration          `json:"minRemaining"`
	PerAttemptTimeout  Duration          `json:"perAttemptTimeout,omitempty"`
	RetryAfterMaxDelay Duration          `json:"retryAfterMaxDelay"`
	RetryOnStatus      []int32           `json:"retryOnStatusCodes"`
	RetryOnErrors      []string          `json:"retryOnErrors"`
	IdempotencyHeader  string            `json:"idempotencyHeader"`
	KeyTemplate        string            `json:"keyTemplate,omitempty"`
	Budget             string            `json:"budgetRef,omitempty"`
	Hedging            *Hedging          `json:"hedging,omitempty"`
	ConnectionPool     *ConnectionPool   `json:"connectionPool,omitempty"`
	Criticality        string            `json:"criticality"`
	Fallback           []FallbackChannel `json:"fallback,omitempty"`
	EventsTopic        string            `json:"eventsTopic,omitempty"`
}

// Backoff is the delay between attempts.
type Backoff struct {
	Jitter     string   `json:"jitter"`
	Base       Duration `json:"base"`
	Cap        Duration `json:"cap"`
	Multiplier int32    `json:"multiplier"`
}

// Hedging is spec.hedging, defaults applied: after Delay (or, when
// Percentile is set, that percentile of the policy's observed latency,
// within Floor and Cap) an attempt still pending is hedged, at most
// MaxHedges times. Each hedge is an attempt: it counts against MaxAttempts
// and asks the budget.
type Hedging struct {
	Delay      Duration `json:"delay,omitempty"`
	Percentile int32    `json:"percentile,omitempty"`
	Floor      Duration `json:"floor,omitempty"`
	Cap        Duration `json:"cap,omitempty"`
	MaxHedges  int32    `json:"maxHedges"`
}

// ConnectionPool names the isolated pool the caller must use.
type ConnectionPool struct {
	Name           string `json:"name"`
	MaxConnections int32  `json:"maxConnections"`
}

// FallbackChannel is a compensation route.
type FallbackChannel struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	Verified bool   `json:"verified"`
}

// Budget is the RetryBudget the policy draws on, resolved by the controller.
type Budget struct {
	Name string `json:"name"`
	// Namespace is the RetryBudget's namespace when it is not the
	// policy's (budgetRef.namespace); absent, it is the policy's. A pod
	// reads a foreign budget's count from the copy the controller
	// publishes in the pod's namespace (BudgetConfigMapNameIn).
	Namespace string `json:"namespace,omitempty"`
	// UID is the RetryBudget's metadata.uid: a budget deleted and created
	// again under the same name is a new budget, whose generation starts
	// again at 1. Absent only in payloads of controllers that predate it.
	UID                 string   `json:"uid,omitempty"`
	Generation          int64    `json:"generation"`
	RetryPercent        int32    `json:"retryPercent"`
	Window              Duration `json:"window"`
	MaxTokens           int32    `json:"maxTokens"`
	MinRetriesPerSecond int32    `json:"minRetriesPerSecond"`
	Partitions          int32    `json:"partitions"`
	// MaxRetriesPerSecond is the fleet's absolute retry allowance; absent
	// when the budget sets none (0 allows no retry).
	MaxRetriesPerSecond *int32 `json:"maxRetriesPerSecond,omitempty"`
	// Counted says the budget selects consumers: its count is published
	// once, in the budget's own ConfigMap (BudgetConfigMapName), never in a
	// policy's payload, and a pod without a count that names it takes no
	// share (docs/configmap-format.md). Absent when the budget selects none.
	Counted bool `json:"counted,omitempty"`
	// Consumers is the count of the pods that share the budget, as a
	// watcher joins it from the budget's ConfigMap (Payload.Join). A
	// controller that predates the budget's ConfigMap inlined it here,
	// without Counted; a payload the controllers publish now never carries it.
	Consumers *Consumers `json:"consumers,omitempty"`
}

// NamespaceOf is the budget's namespace for a policy of policyNamespace.
func (b *Budget) NamespaceOf(policyNamespace string) string {
	if b.Namespace != "" {
		return b.Namespace
	}
	return policyNamespace
}

// Key is "namespace/name", the budget's identity within a pod, for a policy
// of policyNamespace: two policies of two namespaces that name one budget
// share its bucket.
func (b *Budget) Key(policyNamespace string) string {
	return BudgetKey(b.NamespaceOf(policyNamespace), b.Name)
}

// BudgetKey is the key of the budget namespace/name (Budget.Key), for a
// count or shard, which name their budget's namespace themselves.
func BudgetKey(namespace, name string) string { return namespace + "/" + name }

// Duration is a time.Duration written as Go's duration string ("100ms").
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"100ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Marshal validates p and encodes it. The controllers publish only what
// Parse would accept.
func Marshal(p *Payload) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// Parse decodes a payload strictly: unknown fields, another schema version
// or an out-of-range value is an error, and the caller keeps its last good
// policy (or fails closed when it has none).
func Parse(data []byte) (*Payload, error) {
	p, err := decodeStrict[Payload](data, "payload")
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Policy.Fallback) == 0 {
		p.Policy.Fallback = nil // [] and absent mean the same; keep one form
	}
	return p, nil
}

// decodeStrict decodes one JSON object of type T (named what in errors):
// unknown fields, keys in another case and trailing data are errors.
func decodeStrict[T any](data []byte, what string) (*T, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var v T
	if err := dec.Decode(&v); err != nil {
		return nil, &ParseError{Field: what, Reason: err.Error()}
	}
	if dec.More() {
		return nil, &ParseError{Field: what, Reason: "trailing data after the JSON object"}
	}
	if err := checkKeys(data, reflect.TypeFor[T](), ""); err != nil {
		return nil, err
	}
	return &v, nil
}
