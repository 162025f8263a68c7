package policyconfig

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"time"

	"github.com/retryguard/retryguard/contract/limits"
)

// Consumers is the controller's live count of the pods that share a budget,
// and who they are: a pod takes a share of a fleet budget only when a count
// names it (docs/runtime.md, "Fleet budgets").
type Consumers struct {
	// Count is the number of pods that matched the budget's
	// consumers.podSelector at ObservedAt, terminating ones included.
	Count int32 `json:"count"`
	// ObservedAt is when the controller counted, on its wall clock.
	ObservedAt time.Time `json:"observedAt"`
	// Members names the counted pods by their UIDs' fingerprints (see
	// EncodeMembers); absent when the count is 0.
	Members string `json:"members,omitempty"`
}

// MaxConsumerCount bounds a published consumer count: several times the
// pods a whole cluster can hold (Kubernetes is tested to 150,000), so only a
// forged or corrupted count reaches it. A count may be 0: no pod matched
// when the controller counted, so no pod that reads it holds a share.
const MaxConsumerCount = int32(1_000_000)

// MaxConsumerMembers bounds the pods a count names: 32,768 fingerprints are
// 256 KiB, 341 KiB in base64, a third of a ConfigMap. A fleet larger than
// that is still counted in full, and the pods its list leaves out hold no
// share: the bound costs retries, never overshoot.
const MaxConsumerMembers = 32_768

// memberSize is the bytes of one fingerprint.
const memberSize = 8

// The lease on a published consumer count.
const (
	// ConsumerCountRefresh is how often the controller recounts and
	// republishes, with a new ObservedAt, even when nothing changed.
	ConsumerCountRefresh = 15 * time.Second
	// ConsumerCountStaleAfter is how old a count may be before a pod stops
	// trusting it and takes no share at all (the fleet may have grown
	// meanwhile): four refreshes missed.
	ConsumerCountStaleAfter = 4 * ConsumerCountRefresh
	// ConsumerCountClockSkew is the skew allowed between the controller's
	// and a pod's wall clocks: a count dated further ahead of the pod's
	// clock is enforced as if taken when the pod read it.
	ConsumerCountClockSkew = time.Second
	// ConsumerCountDelivery is the delivery bound: the longest a new count
	// takes to reach every pod that watches its ConfigMap through the API
	// server (docs/benchmarks.md measures the informer's spread). A pod
	// whose share grows waits this long after it reads the count, so that
	// the pods whose shares shrank have read it first. A pod whose payloads
	// arrive later than this (a mounted volume: the kubelet's sync period)
	// takes no share of a counted budget's absolute figures.
	ConsumerCountDelivery = 2 * time.Second
)

// EncodeMembers is the published form of the counted pods' UIDs: the first
// 8 bytes of each UID's SHA-256, big-endian, sorted and without repeats,
// concatenated and base64-encoded: 10.7 bytes a pod (21 KiB for 2,000 pods),
// whatever the UIDs' length. A fingerprint is a name, not a secret: a pod
// that no count includes matches one of N fingerprints with probability
// N/2^64. Only the MaxConsumerMembers smallest fingerprints are kept.
func EncodeMembers(uids []string) string {
	fps := make([]uint64, 0, len(uids))
	for _, u := range uids {
		fps = append(fps, fingerprint(u))
	}
	slices.Sort(fps)
	fps = slices.Compact(fps)
	fps = fps[:min(len(fps), MaxConsumerMembers)]
	raw := make([]byte, 0, len(fps)*memberSize)
	for _, f := range fps {
		raw = binary.BigEndian.AppendUint64(raw, f)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func fingerprint(uid string) uint64 {
	sum := sha256.Sum256([]byte(uid))
	return binary.BigEndian.Uint64(sum[:memberSize])
}

// Includes reports whether the count names the pod whose UID is uid. A pod
// without a UID (its Deployment does not set POD_UID from the downward API)
// is named by no count.
func (c *Consumers) Includes(uid string) bool {
	if c == nil || uid == "" {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(c.Members)
	if err != nil || len(raw)%memberSize != 0 {
		return false // Parse refuses it; a hand-built count names no one
	}
	want := fingerprint(uid)
	n := len(raw) / memberSize
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if binary.BigEndian.Uint64(raw[mid*memberSize:]) < want {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo < n && binary.BigEndian.Uint64(raw[lo*memberSize:]) == want
}

// validateBudgetIdentity checks what names a budget and its pods: its UID,
// and a consumer count with its members.
func validateBudgetIdentity(b *Budget) error {
	if len(b.UID) > limits.MaxUIDLength {
		return bad("budget.uid", "needs at most %d bytes", limits.MaxUIDLength)
	}
	if b.Counted && b.UID == "" {
		// A count is joined to its budget by name and UID.
		return bad("budget.uid", "required when counted")
	}
	if b.Consumers == nil {
		return nil
	}
	return validateConsumers("budget.consumers", b.Consumers)
}

// validateConsumers checks one count, wherever it is carried (field names
// its place): inlined in a payload by a controller that predates the
// budget's own ConfigMap, or in that ConfigMap (ParseCount).
func validateConsumers(field string, c *Consumers) error {
	switch {
	case c.Count < 0 || c.Count > MaxConsumerCount:
		return bad(field+".count", "%d is outside 0–%d", c.Count, MaxConsumerCount)
	case c.ObservedAt.IsZero():
		// A count without its time cannot be judged fresh or stale.
		return bad(field+".observedAt", "required")
	}
	_, err := decodeMembers(field+".members", c.Members, min(int(c.Count), MaxConsumerMembers))
	return err
}
