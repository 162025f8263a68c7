package v1alpha1

// ConditionReady is the condition both kinds report first: whether the
// object is in force (published and enforceable by the pods that call the
// dependency).
const ConditionReady = "Ready"

// The kstatus conditions (sigs.k8s.io/cli-utils/pkg/kstatus), abnormal-true:
// each is present only while True, with the Ready reason that caused it, so
// that GitOps tools read a refused object as Failed and one still in the
// works as InProgress, never as Current (docs/status.md).
const (
	// ConditionStalled: the controller refused the object, and only a change
	// to it (or to its relatives) can make it Ready.
	ConditionStalled = "Stalled"
	// ConditionReconciling: the controller is still working on the object:
	// waiting for an object it references, or retrying a failed publish.
	ConditionReconciling = "Reconciling"
)

// Reasons of a RetryPolicy's Ready condition. Every not-Ready reason is also
// the NoRetry reason the policy's pods see, so users and pods read them too.
const (
	ReasonPublished             = "Published"
	ReasonInvalidSpec           = "InvalidSpec"
	ReasonLayerCycle            = "LayerCycle"
	ReasonAmplificationExceeded = "AmplificationExceeded"
	ReasonSharedFailureDomain   = "SharedFailureDomain"
	ReasonParentNotFound        = "ParentNotFound"
	// ReasonParentNotPermitted: the parent, in another namespace, does not
	// (or no longer does) allow this namespace in layer.allowedChildren.
	ReasonParentNotPermitted = "ParentNotPermitted"
	ReasonBudgetNotFound     = "BudgetNotFound"
	// ReasonBudgetNotShared: the budget, in another namespace, does not
	// (or no longer does) admit this namespace in consumers.namespaces.
	ReasonBudgetNotShared = "BudgetNotShared"
	ReasonPublishFailed   = "PublishFailed"
)

// Reasons of a RetryBudget's Ready condition.
const (
	ReasonAccepted         = "Accepted"
	ReasonAbovePlatformCap = "AbovePlatformCap"
	// ReasonNameTooLongToCount: a fleet budget whose name leaves its member
	// shards' ConfigMap names above the object name limit; no shard can be
	// written, so no pod is named and none holds a share.
	ReasonNameTooLongToCount = "NameTooLongToCount"
)

// Reasons of the events the controller records on a RetryBudget about its
// consumers, besides the Ready reasons. Each is recorded once, on the change
// it names, never on every count.
const (
	// ReasonConsumersCounted: a count of the budget's consumers is published
	// for the first time, or again after it was 0.
	ReasonConsumersCounted = "ConsumersCounted"
	// ReasonNoConsumers: consumers.podSelector matches no pod, so no pod
	// holds a share and none retries on this budget.
	ReasonNoConsumers = "NoConsumers"
	// ReasonConsumersAbovePartitions: more consumers than partitions, the
	// declared largest fleet.
	ReasonConsumersAbovePartitions = "ConsumersAbovePartitions"
)
