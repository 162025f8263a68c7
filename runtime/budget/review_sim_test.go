package budget

import (
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// TestReviewSimScaleUpShowsTheOldRuleBreaking: issue 19 item 8 asks every
// scenario in the same run as the old rule it replaces; its finding was
// "while the 2 old pods still hold N = 2, the fleet grants 38 retries/s
// against 20 for about 30 s". The simulation's scale-up with the delivery
// spread sets no oldBreaks, so nothing shows that scenario's assertion can fail.
func TestReviewSimScaleUpShowsTheOldRuleBreaking(t *testing.T) {
	sc := simScenario{name: "scale-up 2 → 20, every payload reaching each pod up to the delivery bound late (partitions 20)", figures: toy,
		initial: 2, added: 18, addAt: 60 * time.Second, lag: policyconfig.ConsumerCountDelivery - 100*time.Millisecond,
		length: 200 * time.Second, tail: 19}
	for seed := range uint64(3) {
		res := simulate(sc, seed)
		old, _ := violations(sc, res[ruleOld])
		if len(old) == 0 {
			t.Errorf("seed %d: the old rules never passed the allowance (max %d/s): the scenario cannot fail", seed, res[ruleOld].max())
		}
	}
}
