package budget

import "testing"

// The scale-up with the delivery spread shows the old rules failing: issue
// 19's finding was "while the 2 old pods still hold N = 2, the fleet grants
// 38 retries/s against 20", and a scenario whose old rules never break
// cannot show that its assertion can fail.
func TestTheScaleUpWithDeliverySpreadBreaksTheOldRules(t *testing.T) {
	sc := scaleUpWithDeliverySpread
	for seed := range uint64(3) {
		res := simulate(sc, seed)
		old, _ := violations(sc, res[ruleOld])
		if len(old) == 0 {
			t.Errorf("seed %d: the old rules never passed the allowance (max %d/s): the scenario cannot fail", seed, res[ruleOld].max())
		}
	}
}
