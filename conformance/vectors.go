// Package conformance holds Retryguard's conformance vectors: language-neutral
// JSON that states what a client of the payload contract must do, and the Go
// types that read them. The Go runtime runs every vector in this module's
// tests (runtime_test.go); any other client, in any language, runs the same
// files (README.md says how). The vectors are the oracle, not the runtime:
// each one is written from the rule it states (docs/runtime.md,
// docs/configmap-format.md), and the admission ones are generated from the
// admission fixtures that the API server's CEL is held to
// (api/v1alpha1/fixtures).
package conformance

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Files holds the vectors and the schemas, as other clients read them.
//
//go:embed vectors/*.json schema/*.json
var Files embed.FS

// The vector files, one per rule family.
const (
	PayloadFile   = "vectors/payload.json"
	AdmissionFile = "vectors/payload-admission.json"
	DurationFile  = "vectors/durations.json"
	KeyFile       = "vectors/keys.json"
	DecideFile    = "vectors/decide.json"
	JitterFile    = "vectors/jitter.json"
	BudgetFile    = "vectors/budget.json"
	DispatchFile  = "vectors/dispatch.json"
	SchemaFile    = "schema/payload-v1.schema.json"
)

// PayloadVector is one payload a client must accept or refuse, as a pod
// reads it from a published ConfigMap's policy.json. A refused payload is
// never enforced: the client keeps its last good policy or, with none,
// makes exactly one attempt.
type PayloadVector struct {
	Name    string          `json:"name"`
	Accept  bool            `json:"accept"`
	Payload json.RawMessage `json:"payload"`
}

// PayloadPatch is a vector written as a change to the file's base payload:
// Set replaces (or adds) the value at each path, Delete removes each path.
// A path is dot-separated object keys ("policy.backoff.base").
type PayloadPatch struct {
	Name   string `json:"name"`
	Accept bool   `json:"accept"`
	// Field is the payload field a refusal names, when the vector states
	// one (a refusal by the JSON decoder names none).
	Field  string                     `json:"field,omitempty"`
	Set    map[string]json.RawMessage `json:"set,omitempty"`
	Delete []string                   `json:"delete,omitempty"`
	// Raw, when set, is the whole policy.json as bytes (for malformed JSON).
	Raw string `json:"raw,omitempty"`
}

// Apply returns the payload the patch makes of base.
func (p PayloadPatch) Apply(base json.RawMessage) ([]byte, error) {
	if p.Raw != "" {
		return []byte(p.Raw), nil
	}
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, err
	}
	for path, v := range p.Set {
		var val any
		if err := json.Unmarshal(v, &val); err != nil {
			return nil, fmt.Errorf("%s: set %s: %w", p.Name, path, err)
		}
		parent, key, err := walk(doc, path)
		if err != nil {
			return nil, fmt.Errorf("%s: set %s: %w", p.Name, path, err)
		}
		parent[key] = val
	}
	for _, path := range p.Delete {
		parent, key, err := walk(doc, path)
		if err != nil {
			return nil, fmt.Errorf("%s: delete %s: %w", p.Name, path, err)
		}
		if _, ok := parent[key]; !ok {
			return nil, fmt.Errorf("%s: delete %s: no such field", p.Name, path)
		}
		delete(parent, key)
	}
	return json.Marshal(doc)
}

// walk returns the object that holds path's last key, and that key.
func walk(doc map[string]any, path string) (map[string]any, string, error) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := doc[k].(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("%q is not an object", k)
		}
		doc = next
	}
	return doc, keys[len(keys)-1], nil
}

// PayloadFileSchema is vectors/payload.json: hand-written payload vectors
// over one base payload.
type PayloadFileSchema struct {
	Comment string          `json:"$comment"`
	Base    json.RawMessage `json:"base"`
	Vectors []PayloadPatch  `json:"vectors"`
}

// DurationVector is one duration string as a payload carries it.
type DurationVector struct {
	Text   string `json:"text"`
	Accept bool   `json:"accept"`
	// Nanoseconds is the value of an accepted duration.
	Nanoseconds int64 `json:"nanoseconds,omitempty"`
}

// KeyVector renders a key template with variables: the key every attempt
// carries, or the code the operation fails with before any attempt.
type KeyVector struct {
	Name     string            `json:"name"`
	Template string            `json:"template"`
	Vars     map[string]string `json:"vars"`
	Key      string            `json:"key,omitempty"`
	Code     string            `json:"code,omitempty"`
}

// DecideInput is what one retry decision rests on, after a failed attempt.
// Durations are duration strings.
type DecideInput struct {
	// Class is the failed attempt's class: transient, ambiguous, permanent
	// or unrecognized.
	Class                 string   `json:"class"`
	Status                int      `json:"status,omitempty"`
	Transport             string   `json:"transport,omitempty"`
	Dispatched            bool     `json:"dispatched"`
	RetryAfter            Duration `json:"retryAfter,omitempty"`
	RetryAfterUnparseable bool     `json:"retryAfterUnparseable,omitempty"`
	// NotEnforced: the policy is not in force (unknown, NoRetry, or a key
	// template that cannot render).
	NotEnforced bool `json:"notEnforced,omitempty"`
	// ReplaySafe: the request carries the rendered key or has an idempotent method.
	ReplaySafe bool `json:"replaySafe"`
	// MayHaveApplied: an earlier attempt may have been applied.
	MayHaveApplied bool `json:"mayHaveApplied,omitempty"`
	// Unrepeatable: the request cannot be sent again (its body was not kept).
	Unrepeatable bool `json:"unrepeatable,omitempty"`
	Attempt      int  `json:"attempt"`
	MaxAttempts  int  `json:"maxAttempts"`
	// Remaining is the deadline left when the failure was seen.
	Remaining Duration `json:"remaining"`
	// Wait is the backoff draw for the next attempt.
	Wait               Duration `json:"wait"`
	PerAttemptTimeout  Duration `json:"perAttemptTimeout,omitempty"`
	MinRemaining       Duration `json:"minRemaining"`
	RetryAfterMaxDelay Duration `json:"retryAfterMaxDelay"`
	// Budget is the budget's verdict when it is asked: "" grants, or a
	// denial (tokens, ratio, rate, share, delivery).
	Budget string `json:"budget,omitempty"`
}

// DecideWant is the decision: the next state (BACKOFF_WAIT to retry), the
// code that ends the operation ("" when it retries), the wait before the
// retry, whether the failure was retry-eligible, and whether the budget was
// asked (only when every other rule allows a retry, so that no token is
// spent on a retry another rule forbids).
type DecideWant struct {
	Next        string   `json:"next"`
	Code        string   `json:"code,omitempty"`
	Sleep       Duration `json:"sleep,omitempty"`
	Eligible    bool     `json:"eligible"`
	BudgetAsked bool     `json:"budgetAsked"`
}

// DecideVector is one decision.
type DecideVector struct {
	Name string `json:"name"`
	// Input overrides the file's defaults, key by key.
	Input json.RawMessage `json:"input"`
	Want  DecideWant      `json:"want"`
}

// DecideFileSchema is vectors/decide.json.
type DecideFileSchema struct {
	Comment  string          `json:"$comment"`
	Defaults json.RawMessage `json:"defaults"`
	Vectors  []DecideVector  `json:"vectors"`
}

// JitterVector is one backoff draw's bounds: every draw lies in [min, max]
// and both ends can be drawn.
type JitterVector struct {
	Name       string   `json:"name"`
	Jitter     string   `json:"jitter"`
	Base       Duration `json:"base"`
	Cap        Duration `json:"cap"`
	Multiplier int32    `json:"multiplier"`
	// Retry is the retry's number, 1 for the first (after attempt 1).
	Retry int `json:"retry"`
	// Prev is the previous draw (Decorrelated), 0 on the first retry.
	Prev Duration `json:"prev,omitempty"`
	Min  Duration `json:"min"`
	Max  Duration `json:"max"`
}

// BudgetVector is a sequence of steps on one pod's budget, on a clock that
// starts at 0 and only moves forward.
type BudgetVector struct {
	Name string `json:"name"`
	// Budget is the payload's budget object (docs/configmap-format.md)
	// without a consumer count; Count, when set, is the count the pod reads.
	Budget json.RawMessage `json:"budget"`
	Count  *BudgetCount    `json:"count,omitempty"`
	Steps  []BudgetStep    `json:"steps"`
}

// BudgetCount is a consumer count as this pod reads it.
type BudgetCount struct {
	Count int32 `json:"count"`
	// ObservedAt is when it was taken, relative to the clock's start.
	ObservedAt Duration `json:"observedAt"`
	// IncludesPod: the count's members name this pod.
	IncludesPod bool `json:"includesPod"`
}

// BudgetStep moves the clock to At, records Primaries first attempts (the
// first Successes of them succeeded), then asks for Retries retries: Granted
// of them are granted, and the first refusal, if any, is Denial.
type BudgetStep struct {
	At        Duration `json:"at"`
	Primaries int      `json:"primaries,omitempty"`
	Successes int      `json:"successes,omitempty"`
	Retries   int      `json:"retries,omitempty"`
	Granted   int      `json:"granted"`
	Denial    string   `json:"denial,omitempty"`
}

// File is a vector file that is a list of vectors with a comment that
// states their rule.
type File[V any] struct {
	Comment string `json:"$comment"`
	Vectors []V    `json:"vectors"`
}

// Duration is a duration string in a vector ("150ms"); it reads as
// time.Duration.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a vector's duration is a string such as \"150ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Read decodes the vector file name into v, refusing unknown fields so that a
// misspelt key in a vector fails rather than being ignored.
func Read(name string, v any) error {
	raw, err := Files.ReadFile(name)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// DispatchVector is one real failure between a client and its dependency
// (Failure names it; the runner produces it) and the evidence a client must
// report for one POST without an idempotency key.
type DispatchVector struct {
	Name    string       `json:"name"`
	Failure string       `json:"failure"`
	Want    DispatchWant `json:"want"`
}

// DispatchWant is the last attempt's evidence and the operation's end.
type DispatchWant struct {
	Dispatched bool   `json:"dispatched"`
	Transport  string `json:"transport"`
	Class      string `json:"class"`
	State      string `json:"state"`
	Attempts   int    `json:"attempts"`
}

// DispatchFileSchema is vectors/dispatch.json.
type DispatchFileSchema struct {
	Comment string           `json:"$comment"`
	Vectors []DispatchVector `json:"vectors"`
}
