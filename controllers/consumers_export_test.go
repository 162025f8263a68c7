package controllers

import (
	"context"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// BudgetsSelecting exposes budgetsSelecting to the benchmarks of the
// external test package, which needs testenv (and testenv imports this package).
var BudgetsSelecting = budgetsSelecting

// PublishMembers exposes publishMembers: the test of its write order passes
// the live shards, the pods counted and the count in force.
func (r *RetryBudgetReconciler) PublishMembers(ctx context.Context, b *v1.RetryBudget, live map[string]*policyconfig.MemberShard,
	counted []string, inForce policyconfig.Consumers, gen int64) error {
	own := []countTarget{{Namespace: b.Namespace, Owner: b}}
	tally := consumerTally{Count: int32(len(counted)), Members: policyconfig.EncodeMembers(counted)}
	return r.publishMembers(ctx, b, own, []map[string]*policyconfig.MemberShard{live}, tally, inForce, gen)
}
