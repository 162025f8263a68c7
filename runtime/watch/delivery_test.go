package watch_test

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The file watcher states its delivery bound, above the consumer count's:
// retry.New learns a source's delay only through a DeliveryBound()
// time.Duration method, and docs/runtime.md says "A pod that reads its
// payloads from a mounted volume takes no share of a counted budget"
// (issue 19, item 4).
func TestFilesStatesADeliveryBoundAboveTheCountsBound(t *testing.T) {
	var src any = watch.NewFiles(t.TempDir())
	d, ok := src.(interface{ DeliveryBound() time.Duration })
	if !ok {
		t.Fatal("watch.Files has no DeliveryBound method: retry.New(watch.NewFiles(dir)) gives a mounted-volume pod a full share of a counted budget")
	}
	if d.DeliveryBound() <= policyconfig.ConsumerCountDelivery {
		t.Fatalf("watch.Files states %v, within the %v delivery bound", d.DeliveryBound(), policyconfig.ConsumerCountDelivery)
	}
}
