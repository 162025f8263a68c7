// Package webhooks serves Retryguard's validating admission for RetryPolicy
// and RetryBudget. The validators are thin adapters over what one object
// cannot show: the cross-object rules of api/policygraph, reading other
// policies through the manager's indexed cache, and the one single-object
// rule CEL cannot state (a label selector that parses). Every other
// single-object rule is the CRD's, which the API server checks before it
// calls a webhook.
package webhooks
