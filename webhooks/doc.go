// Package webhooks serves Retryguard's validating admission for RetryPolicy
// and RetryBudget. The validators are thin adapters: they re-run the
// single-object rules of api/v1alpha1 (so the rules hold even where a CRD
// lacks its CEL) and the cross-object rules of api/policygraph, reading other
// policies through the manager's indexed cache.
package webhooks
