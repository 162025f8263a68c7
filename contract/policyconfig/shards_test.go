package policyconfig_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

// shardedFleet is fixtures.Fleet's count as the controller publishes it
// now: the count without members, at membership generation gen, and the
// shards that name FleetPods.
func shardedFleet(gen int64) (*policyconfig.Count, []*policyconfig.MemberShard) {
	c := fleetCount()
	c.MembersGeneration, c.Consumers.Members = gen, ""
	var shards []*policyconfig.MemberShard
	for shard, members := range policyconfig.ShardMembers(policyconfig.EncodeMembers(fixtures.FleetPods())) {
		shards = append(shards, &policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion, Namespace: "auth",
			Budget: "telephony-provider", UID: fixtures.BudgetUID, Shard: shard, Generation: gen, Members: members})
	}
	return c, shards
}

// shardOf is the shard among shards that names uid's shard (nil: none).
func shardOf(shards []*policyconfig.MemberShard, uid string) *policyconfig.MemberShard {
	for _, s := range shards {
		if s.Shard == policyconfig.ShardOf(uid) {
			return s
		}
	}
	return nil
}

// The shards split the members by their fingerprints' first byte, each pod
// in exactly one, and together they name exactly the pods the count did.
func TestShardsNameExactlyTheCountedPods(t *testing.T) {
	c, shards := shardedFleet(3)
	if got := c.WithShards(shards...); got.Consumers != *fixtures.Fleet().Budget.Consumers {
		t.Fatalf("every shard joined: %+v, want the members of the whole count", got.Consumers)
	}
	for _, uid := range fixtures.FleetPods() {
		own := c.WithShards(shardOf(shards, uid))
		if !own.Consumers.Includes(uid) {
			t.Errorf("pod %s is not named by its own shard %s", uid, policyconfig.ShardOf(uid))
		}
		if c.WithShards().Consumers.Includes(uid) {
			t.Errorf("pod %s is named with no shard", uid)
		}
		for _, s := range shards {
			if s.Shard != policyconfig.ShardOf(uid) && c.WithShards(s).Consumers.Includes(uid) {
				t.Errorf("pod %s is named by shard %s, not its own", uid, s.Shard)
			}
		}
	}
	seen := map[string]bool{}
	for i := range 4096 {
		seen[policyconfig.ShardOf(fmt.Sprintf("pod-%d", i))] = true
	}
	if len(seen) != policyconfig.MemberShards {
		t.Errorf("4,096 pods fell in %d shards, want all %d", len(seen), policyconfig.MemberShards)
	}
}

// A pod trusts a shard only for its own budget and a count of the shard's
// generation or later: a pod added to a shard before the count that counts
// it has arrived, or a shard of another budget, names no one.
func TestWithShardsFailsSafe(t *testing.T) {
	c, shards := shardedFleet(5)
	uid := fixtures.FleetPods()[0]
	for name, mutate := range map[string]func(*policyconfig.MemberShard){
		"a newer generation than the count": func(s *policyconfig.MemberShard) { s.Generation = 6 },
		"another UID":                       func(s *policyconfig.MemberShard) { s.UID = "8e4d3b72-1c6f-4a8b-8d2e-3f9a7b5c6d01" },
		"another budget":                    func(s *policyconfig.MemberShard) { s.Budget = "other" },
		"another namespace":                 func(s *policyconfig.MemberShard) { s.Namespace = "billing" },
		"another shard's members":           func(s *policyconfig.MemberShard) { s.Shard = "zz" },
	} {
		s := *shardOf(shards, uid)
		mutate(&s)
		if got := c.WithShards(&s); got.Consumers.Includes(uid) {
			t.Errorf("%s: the pod is named", name)
		}
	}
	old := *shardOf(shards, uid)
	old.Generation = 1
	if !c.WithShards(&old).Consumers.Includes(uid) {
		t.Error("a shard unchanged since an earlier generation no longer names its pod")
	}
	// More named than counted: no one.
	small := *c
	small.Consumers.Count = 0
	if small.WithShards(shards...).Consumers.Members != "" {
		t.Error("shards naming more pods than the count were joined")
	}
	// A count that carries its members (an older controller's) is its own.
	inline := fleetCount()
	if inline.WithShards() != inline {
		t.Error("a count with inline members was rewritten")
	}
	before := *c
	_ = c.WithShards(shards...)
	if !reflect.DeepEqual(*c, before) {
		t.Error("WithShards changed its receiver")
	}
}

// A runtime released before the shards reads the new count by the
// previous rules: a strict decode of the fields it knew (schemaVersion,
// namespace, budget, uid, consumers{count, observedAt, members}), and a
// pod named only by the members. It refuses the count (unknown field
// membersGeneration), so it keeps its last good count, which goes stale;
// and were it read leniently it names no pod. Either way: no share.
func TestPreviousRuntimeTakesNoShareOfTheShardedCount(t *testing.T) {
	c, _ := shardedFleet(1)
	raw, err := policyconfig.MarshalCount(c)
	if err != nil {
		t.Fatal(err)
	}
	type previousCount struct {
		SchemaVersion string `json:"schemaVersion"`
		Namespace     string `json:"namespace"`
		Budget        string `json:"budget"`
		UID           string `json:"uid"`
		Consumers     struct {
			Count      int32  `json:"count"`
			ObservedAt string `json:"observedAt"`
			Members    string `json:"members,omitempty"`
		} `json:"consumers"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var strict previousCount
	if err := dec.Decode(&strict); err == nil || !strings.Contains(err.Error(), "membersGeneration") {
		t.Fatalf("the previous strict decode accepted the sharded count: %v\n%s", err, raw)
	}
	var lenient previousCount
	if err := json.Unmarshal(raw, &lenient); err != nil {
		t.Fatal(err)
	}
	if lenient.SchemaVersion != "policy.retryguard.io/consumers/v1" {
		t.Fatalf("the count's version moved to %q: the previous runtime reads it only as v1", lenient.SchemaVersion)
	}
	named := &policyconfig.Consumers{Count: lenient.Consumers.Count, Members: lenient.Consumers.Members}
	for _, uid := range fixtures.FleetPods() {
		if named.Includes(uid) {
			t.Fatalf("the previous rules name pod %s from a count without members", uid)
		}
	}
}

// ParseMemberShard is as strict as ParseCount: every refusal names its
// field; a count of shards carries no members of its own.
func TestParseMemberShardRefuses(t *testing.T) {
	_, shards := shardedFleet(2)
	good, err := policyconfig.MarshalMemberShard(shards[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, err := policyconfig.ParseMemberShard(good); err != nil || !reflect.DeepEqual(got, shards[0]) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	other := "00"
	if shards[0].Shard == other {
		other = "01"
	}
	for field, raw := range map[string]string{
		"schemaVersion": strings.Replace(string(good), policyconfig.MembersSchemaVersion, "policy.retryguard.io/members/v2", 1),
		"uid":           strings.Replace(string(good), fixtures.BudgetUID, "", 1),
		"namespace":     strings.Replace(string(good), `"auth"`, `"Auth"`, 1),
		"budget":        strings.Replace(string(good), `"telephony-provider"`, `"telephony provider"`, 1),
		"shard":         strings.Replace(string(good), `"shard":"`+shards[0].Shard, `"shard":"G`, 1),
		"members":       strings.Replace(string(good), `"shard":"`+shards[0].Shard, `"shard":"`+other, 1),
		"generation":    strings.Replace(string(good), `"generation":2`, `"generation":0`, 1),
		"members.b64":   strings.Replace(string(good), `"members":"`, `"members":"!`, 1),
		"unknown field": strings.Replace(string(good), `{"schemaVersion"`, `{"extra":1,"schemaVersion"`, 1),
	} {
		var pe *policyconfig.ParseError
		if _, err := policyconfig.ParseMemberShard([]byte(raw)); err == nil || !errors.Is(err, policyconfig.ErrInvalidPayload) {
			t.Errorf("%s: accepted or not an ErrInvalidPayload: %v\n%s", field, err, raw)
		} else if errors.As(err, &pe) && !strings.HasPrefix(field, strings.Split(pe.Field, ".")[0]) && field != "unknown field" {
			t.Errorf("%s: the error names %q", field, pe.Field)
		}
	}
	c, _ := shardedFleet(2)
	c.Consumers.Members = fleetCount().Consumers.Members
	if _, err := policyconfig.MarshalCount(c); err == nil || !strings.Contains(err.Error(), "consumers.members") {
		t.Fatalf("a count of shards with members of its own: %v", err)
	}
}

// FuzzParseMemberShard: ParseMemberShard never panics, and what it accepts
// is written back to a shard it reads back unchanged.
func FuzzParseMemberShard(f *testing.F) {
	_, shards := shardedFleet(1)
	good, _ := policyconfig.MarshalMemberShard(shards[0])
	f.Add(good)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := policyconfig.ParseMemberShard(data)
		if err != nil {
			if !errors.Is(err, policyconfig.ErrInvalidPayload) {
				t.Fatalf("not an ErrInvalidPayload: %v", err)
			}
			return
		}
		raw, err := policyconfig.MarshalMemberShard(s)
		if err != nil {
			t.Fatalf("accepted but not written back: %v", err)
		}
		if again, err := policyconfig.ParseMemberShard(raw); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("read back %+v, %v", again, err)
		}
	})
}
