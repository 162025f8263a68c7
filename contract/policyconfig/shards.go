package policyconfig

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/retryguard/retryguard/contract/limits"
)

// A fleet budget's members are published apart from its count, in shards:
// the count (retrybudget-<name>) is the heartbeat every pod of the budget
// reads, renewed every ConsumerCountRefresh and the same size whatever the
// fleet's; the members are split by the first byte of each pod's
// fingerprint into up to MemberShards ConfigMaps (retrymembers-<xx>-<name>),
// each written only when its own members change, and each pod watches its
// own shard alone (docs/configmap-format.md, "The members' shards").
const (
	// MembersSchemaVersion identifies a shard's format. ParseMemberShard
	// rejects any other.
	MembersSchemaVersion = "policy.retryguard.io/members/v1"
	// MembersDataKey is the data key of a shard's ConfigMap.
	MembersDataKey = "members.json"
	// MembersLabel marks a shard's ConfigMap; its value is the budget's
	// name (shortened as BudgetLabel's is). The ValidatingAdmissionPolicy
	// reserves it, with ManagedByLabel and the name, for the operator. It
	// is not BudgetLabel, which a runtime watches for counts.
	MembersLabel = "policy.retryguard.io/members"
	// ShardLabel is a shard's ConfigMap's shard (ShardOf): a pod selects
	// its own shard by it on the API server.
	ShardLabel = "policy.retryguard.io/shard"
	// MembersConfigMapPrefix starts the name of every shard's ConfigMap.
	MembersConfigMapPrefix = "retrymembers-"
	// SharedMembersConfigMapPrefix starts the name of every copy of a
	// shard in a namespace the budget is shared with
	// (MemberShardConfigMapNameIn).
	SharedMembersConfigMapPrefix = "retrysharedmembers-"
	// MemberShards is the number of shards: one per value of a
	// fingerprint's first byte.
	MemberShards = 256
)

// MemberShardConfigMapName is the name of the ConfigMap that holds a
// budget's shard (two hex digits, ShardOf).
func MemberShardConfigMapName(shard, budget string) string {
	return MembersConfigMapPrefix + shard + "-" + budget
}

// MemberShardConfigMapNameIn is the name of the ConfigMap that holds, in
// namespace, shard of the members of budgetNamespace/budget: the budget's
// own in its namespace, elsewhere its copy (as BudgetConfigMapNameIn).
func MemberShardConfigMapNameIn(namespace, shard, budgetNamespace, budget string) string {
	if namespace == budgetNamespace {
		return MemberShardConfigMapName(shard, budget)
	}
	return SharedMembersConfigMapPrefix + shard + "-" + budgetNamespace + "." + budget
}

// ShardOf is the shard that names the pod whose UID is uid: the first byte
// of its fingerprint, two lowercase hex digits.
func ShardOf(uid string) string { return fmt.Sprintf("%02x", fingerprint(uid)>>56) }

// ShardMembers splits members (EncodeMembers' form) into their shards:
// shard → the members in it, in the same form. A shard that names no pod
// is absent; members that do not decode name no one.
func ShardMembers(members string) map[string]string {
	raw, err := base64.StdEncoding.DecodeString(members)
	if err != nil || len(raw)%memberSize != 0 {
		return nil
	}
	by := map[string][]byte{}
	for i := 0; i < len(raw); i += memberSize {
		s := fmt.Sprintf("%02x", raw[i])
		by[s] = append(by[s], raw[i:i+memberSize]...)
	}
	out := make(map[string]string, len(by))
	for s, b := range by {
		out[s] = base64.StdEncoding.EncodeToString(b)
	}
	return out
}

// IntersectMembers is the members a and b (EncodeMembers' form) both
// name, in the same form; members that do not decode name no one.
func IntersectMembers(a, b string) string {
	ra, errA := base64.StdEncoding.DecodeString(a)
	rb, errB := base64.StdEncoding.DecodeString(b)
	if errA != nil || errB != nil || len(ra)%memberSize != 0 || len(rb)%memberSize != 0 {
		return ""
	}
	in := map[uint64]bool{}
	for i := 0; i < len(rb); i += memberSize {
		in[binary.BigEndian.Uint64(rb[i:])] = true
	}
	var out []byte
	for i := 0; i < len(ra); i += memberSize {
		if in[binary.BigEndian.Uint64(ra[i:])] {
			out = append(out, ra[i:i+memberSize]...)
		}
	}
	return base64.StdEncoding.EncodeToString(out)
}

// MemberShard is what a shard's ConfigMap carries: the budget it names
// pods for, by namespace, name and UID, the shard, the membership
// generation it was written at, and its members.
type MemberShard struct {
	SchemaVersion string `json:"schemaVersion"`
	Namespace     string `json:"namespace"`
	Budget        string `json:"budget"`
	UID           string `json:"uid"`
	Shard         string `json:"shard"`
	// Generation is the count's MembersGeneration this shard's members
	// were written for: a pod trusts a shard only under a count of that
	// generation or a later one, so that a pod added to a shard before
	// the count that counts it arrives holds no share meanwhile.
	Generation int64 `json:"generation"`
	// Members is EncodeMembers of the shard's pods, each fingerprint
	// starting with the shard's byte.
	Members string `json:"members"`
}

// MarshalMemberShard validates s and encodes it.
func MarshalMemberShard(s *MemberShard) ([]byte, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// ParseMemberShard decodes a shard as strictly as ParseCount decodes a
// count. A shard that does not parse names no one.
func ParseMemberShard(data []byte) (*MemberShard, error) {
	s, err := decodeStrict[MemberShard](data, "members")
	if err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *MemberShard) validate() error {
	switch {
	case s.SchemaVersion != MembersSchemaVersion:
		return bad("schemaVersion", "%q is not %q; upgrade the runtime or the controllers", s.SchemaVersion, MembersSchemaVersion)
	case len(s.Namespace) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(s.Namespace):
		return bad("namespace", "%q is not a namespace name (a DNS-1123 label)", s.Namespace)
	case len(s.Shard) != 2 || !isLowerHex(s.Shard):
		return bad("shard", "%q is not two lowercase hex digits", s.Shard)
	case len(MemberShardConfigMapName(s.Shard, s.Budget)) > limits.MaxObjectNameLength || !dnsSubdomain.MatchString(s.Budget):
		return bad("budget", "%q is not an object name (a DNS-1123 subdomain that fits %sxx-)", s.Budget, MembersConfigMapPrefix)
	case s.UID == "" || len(s.UID) > limits.MaxUIDLength:
		return bad("uid", "needs 1–%d bytes", limits.MaxUIDLength)
	case s.Generation < 1:
		return bad("generation", "%d is not a membership generation (1 or more)", s.Generation)
	}
	raw, err := decodeMembers("members", s.Members, MaxConsumerMembers)
	if err != nil {
		return err
	}
	var first uint64
	fmt.Sscanf(s.Shard, "%02x", &first)
	for i := 0; i < len(raw); i += memberSize {
		if binary.BigEndian.Uint64(raw[i:])>>56 != first {
			return bad("members", "fingerprint %d is not of shard %s", i/memberSize, s.Shard)
		}
	}
	return nil
}

func isLowerHex(s string) bool {
	return !slices.ContainsFunc([]byte(s), func(c byte) bool { return (c < '0' || c > '9') && (c < 'a' || c > 'f') })
}

// decodeMembers decodes members (EncodeMembers' form) and checks that they
// are whole fingerprints, sorted without repeats, and name at most most pods.
func decodeMembers(field, members string, most int) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(members)
	switch {
	case err != nil:
		return nil, bad(field, "is not standard base64: %v", err)
	case len(raw)%memberSize != 0:
		return nil, bad(field, "holds %d bytes, not a whole number of %d-byte fingerprints", len(raw), memberSize)
	case len(raw)/memberSize > most:
		// More names than pods counted would let one pod's share be
		// taken by several.
		return nil, bad(field, "names %d pods, more than the count %d", len(raw)/memberSize, most)
	}
	for i := memberSize; i < len(raw); i += memberSize {
		if binary.BigEndian.Uint64(raw[i-memberSize:]) >= binary.BigEndian.Uint64(raw[i:]) {
			return nil, bad(field, "fingerprint %d is not above the one before it: they are sorted, without repeats", i/memberSize)
		}
	}
	return raw, nil
}

// WithShards returns the count as a pod enforces it: c's count, with the
// members of the shards given (a pod passes its own shard alone). A count
// that carries its members itself (MembersGeneration 0, the form of a
// controller that predates the shards) is returned as it is. Otherwise a
// shard's members are joined when it is the same budget's (namespace, name,
// UID), written for this count's generation or an earlier one, and the
// members joined name no more pods than the count; any other shard, or a
// second one of the same shard, names no one. A pod that no joined shard
// names holds no share. c is never modified.
func (c *Count) WithShards(shards ...*MemberShard) *Count {
	if c == nil || c.MembersGeneration == 0 {
		return c
	}
	out := *c
	out.Consumers.Members = ""
	byShard := map[string][]byte{}
	for _, s := range shards {
		if s == nil || s.Namespace != c.Namespace || s.Budget != c.Budget || s.UID != c.UID || s.Generation > c.MembersGeneration {
			continue
		}
		if _, twice := byShard[s.Shard]; twice {
			continue
		}
		if s.validate() == nil {
			byShard[s.Shard], _ = base64.StdEncoding.DecodeString(s.Members)
		}
	}
	var raw []byte
	for _, k := range slices.Sorted(maps.Keys(byShard)) {
		raw = append(raw, byShard[k]...) // the shards are disjoint and ordered by their first byte
	}
	if n := len(raw) / memberSize; n > 0 && n <= int(c.Consumers.Count) {
		out.Consumers.Members = base64.StdEncoding.EncodeToString(raw)
	}
	return &out
}
