package informer_test

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// The informer states the consumer count's delivery bound, which its
// measured spread stays below (BenchmarkInformerDeliverySpread): retry.New
// gives a Source that states no bound no share of a counted budget.
func TestInformerStatesTheCountsDeliveryBound(t *testing.T) {
	var src any = informer.New(nil, "shop")
	d, ok := src.(interface{ DeliveryBound() time.Duration })
	if !ok {
		t.Fatal("informer.Informer has no DeliveryBound method: retry.New would give its pods no share of a counted budget")
	}
	if got := d.DeliveryBound(); got != policyconfig.ConsumerCountDelivery {
		t.Fatalf("the informer states %v, want the count's delivery bound %v", got, policyconfig.ConsumerCountDelivery)
	}
}
