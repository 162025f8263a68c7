package policyconfig

import (
	"encoding/json"

	"github.com/retryguard/retryguard/contract/limits"
)

// A fleet budget's consumer count is published once per budget, in a
// ConfigMap of its own, and never in the policies' payloads: a count change
// is one write whatever the number of policies that draw on the budget, and
// a pod receives it once (docs/configmap-format.md, "The count's
// ConfigMap"; docs/benchmarks.md measures both).
const (
	// CountSchemaVersion identifies the count's format. ParseCount rejects
	// any other.
	CountSchemaVersion = "policy.retryguard.io/consumers/v1"
	// CountDataKey is the data key of the budget's ConfigMap that holds
	// the count.
	CountDataKey = "consumers.json"
	// BudgetLabel selects the budgets' ConfigMaps; its value is the
	// budget's name (shortened like PolicyLabel's past 63 characters). The
	// ValidatingAdmissionPolicy reserves it, with ManagedByLabel and the
	// name, for the operator.
	BudgetLabel = "policy.retryguard.io/budget"
	// BudgetConfigMapPrefix starts the name of every budget's ConfigMap.
	BudgetConfigMapPrefix = "retrybudget-"
	// SharedBudgetConfigMapPrefix starts the name of every copy of a
	// budget's count in a namespace it admits (BudgetConfigMapNameIn). It
	// is not BudgetConfigMapPrefix, so that no copy's name is a budget's
	// own.
	SharedBudgetConfigMapPrefix = "retrysharedbudget-"
	// BudgetOwnerKind is the kind of the controller owner reference a
	// budget's ConfigMap carries: the RetryBudget it counts for.
	BudgetOwnerKind = "RetryBudget"
	// SharedOwnerKind is the kind of the controller owner reference a copy
	// of a budget's count or shard carries: a RetryPolicy of the copy's
	// namespace that names the budget, since an owner reference cannot
	// cross namespaces and the garbage collector must still collect it.
	SharedOwnerKind = "RetryPolicy"
)

// BudgetConfigMapName is the name of the ConfigMap a budget's count is
// published in.
func BudgetConfigMapName(budget string) string { return BudgetConfigMapPrefix + budget }

// BudgetConfigMapNameIn is the name of the ConfigMap that holds, in
// namespace, the count of the budget budgetNamespace/budget: the budget's
// own in its namespace, and elsewhere the copy the controller publishes in
// each namespace whose policies draw on it, since a pod reads only its own
// namespace's ConfigMaps. A namespace name has no dot, so no two budgets'
// copies share a name.
func BudgetConfigMapNameIn(namespace, budgetNamespace, budget string) string {
	if namespace == budgetNamespace {
		return BudgetConfigMapName(budget)
	}
	return SharedBudgetConfigMapPrefix + budgetNamespace + "." + budget
}

// OwnerKindIn is the kind that controls, in namespace, the count and the
// shards of a budget of budgetNamespace: the RetryBudget in its own
// namespace, a RetryPolicy in a namespace it is shared with.
func OwnerKindIn(namespace, budgetNamespace string) string {
	if namespace == budgetNamespace {
		return BudgetOwnerKind
	}
	return SharedOwnerKind
}

// Count is what a budget's ConfigMap carries: the budget it counts for, by
// namespace, name and UID, and the count.
type Count struct {
	SchemaVersion string `json:"schemaVersion"`
	Namespace     string `json:"namespace"`
	// Budget is the RetryBudget's name, UID its metadata.uid: a count is
	// joined only to a payload of the same budget, never to one that has
	// the same name after a deletion and a creation.
	Budget string `json:"budget"`
	UID    string `json:"uid"`
	// MembersGeneration, when set, says the members are not in the count
	// but in the budget's shards (MemberShard): it is the membership's
	// generation, one more at every change of the counted pods, and a pod
	// trusts only a shard written for it or an earlier one. Absent (0):
	// the count carries its members itself, as a controller that
	// predates the shards published it. A runtime that predates the field
	// refuses the count, so it keeps its last good count, which goes stale.
	MembersGeneration int64     `json:"membersGeneration,omitempty"`
	Consumers         Consumers `json:"consumers"`
}

// MarshalCount validates c and encodes it.
func MarshalCount(c *Count) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// ParseCount decodes a count as strictly as Parse decodes a payload. A
// count that does not parse is not joined: the pod keeps the last good
// count it joined, which goes stale and then gives no share.
func ParseCount(data []byte) (*Count, error) {
	c, err := decodeStrict[Count](data, "count")
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Count) validate() error {
	switch {
	case c.SchemaVersion != CountSchemaVersion:
		return bad("schemaVersion", "%q is not %q; upgrade the runtime or the controllers", c.SchemaVersion, CountSchemaVersion)
	case len(c.Namespace) > limits.MaxDNSLabelLength || !dnsLabel.MatchString(c.Namespace):
		return bad("namespace", "%q is not a namespace name (a DNS-1123 label)", c.Namespace)
	case len(BudgetConfigMapName(c.Budget)) > limits.MaxObjectNameLength || !dnsSubdomain.MatchString(c.Budget):
		return bad("budget", "%q is not an object name (a DNS-1123 subdomain that fits %s)", c.Budget, BudgetConfigMapPrefix)
	case c.UID == "" || len(c.UID) > limits.MaxUIDLength:
		return bad("uid", "needs 1–%d bytes", limits.MaxUIDLength)
	case c.MembersGeneration < 0:
		return bad("membersGeneration", "%d is negative", c.MembersGeneration)
	case c.MembersGeneration > 0 && c.Consumers.Members != "":
		// One home for the members: a count of shards names no one itself.
		return bad("consumers.members", "present with membersGeneration: the members are in the shards")
	}
	return validateConsumers("consumers", &c.Consumers)
}

// Join returns the payload as a pod enforces it, with its budget's count
// joined from the budget's ConfigMap (or its copy): c when it counts for
// the payload's budget, by namespace, name and UID; otherwise none, so that the pod takes
// no share until a count of that budget names it. A payload whose budget
// is not Counted is returned as it is (a payload of an older controller
// keeps the count it inlined). p is never modified: the result is a copy
// whenever it differs. Join is the one place a count meets a payload, for
// every watcher.
func (p *Payload) Join(c *Count) *Payload {
	if p == nil || p.Budget == nil || !p.Budget.Counted {
		return p
	}
	var joined *Consumers
	if c != nil && c.Namespace == p.Budget.NamespaceOf(p.Policy.Namespace) && c.Budget == p.Budget.Name && c.UID == p.Budget.UID {
		cc := c.Consumers
		joined = &cc
	}
	if joined == nil && p.Budget.Consumers == nil {
		return p
	}
	out, b := *p, *p.Budget
	b.Consumers, out.Budget = joined, &b
	return &out
}
