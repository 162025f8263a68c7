package watch

import "time"

// mountedVolumeDelivery is how late a change to a ConfigMap reaches a pod
// through a mounted volume: the kubelet's sync period (1 min by default)
// plus the TTL of its ConfigMap cache (1 min by default). docs/benchmarks.md
// measured 63 s and 89 s from update to enforcement.
const mountedVolumeDelivery = 2 * time.Minute

// DeliveryBound is how late Files may deliver a change: a mounted volume's,
// mountedVolumeDelivery, far above the consumer count's delivery bound
// (policyconfig.ConsumerCountDelivery), so a pod that reads its payloads
// through Files takes no share of a counted budget's absolute figures
// (docs/runtime.md, "Fleet budgets"). retry.New reads it.
func (*Files) DeliveryBound() time.Duration { return mountedVolumeDelivery }
