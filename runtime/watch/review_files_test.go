package watch_test

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/policyconfig"
	"github.com/retryguard/retryguard/runtime/watch"
)

// TestReviewFilesStatesItsDeliveryBound: retry.New tells its registry a
// source's delivery bound only through a DeliveryBound() time.Duration
// method, and the file watcher (a mounted ConfigMap volume, 63–89 s late)
// has none, so a file-watcher pod takes its full share of a counted budget.
// Breaks docs/runtime.md: "A pod that reads its payloads from a mounted
// volume takes no share of a counted budget", and issue 19 item 4.
func TestReviewFilesStatesItsDeliveryBound(t *testing.T) {
	var src any = watch.NewFiles(t.TempDir())
	d, ok := src.(interface{ DeliveryBound() time.Duration })
	if !ok {
		t.Fatal("watch.Files has no DeliveryBound method: retry.New(watch.NewFiles(dir)) gives a mounted-volume pod a full share of a counted budget")
	}
	if d.DeliveryBound() <= policyconfig.ConsumerCountDelivery {
		t.Fatalf("watch.Files states %v, within the %v delivery bound", d.DeliveryBound(), policyconfig.ConsumerCountDelivery)
	}
}
