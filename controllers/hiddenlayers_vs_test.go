package controllers

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// vs parses a VirtualService written in YAML into unstructured content, as
// the API server's JSON reaches an unstructured client.
func vs(t testing.TB, doc string) map[string]any {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoutingOf(t *testing.T) {
	const meta = "metadata: {name: x, namespace: shop}\n"
	const other = "metadata: {name: x, namespace: team-b}\n"
	for _, tc := range []struct {
		name     string
		doc      string
		service  string
		routes   bool
		attempts int32
	}{
		{"retries unset: Istio's default of two retries", meta + "spec: {hosts: [payments], http: [{route: [{destination: {host: payments}}]}]}",
			"payments", true, 3},
		{"retries.attempts 0 disables retries", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 0}, route: [{destination: {host: payments}}]}]}",
			"payments", true, 1},
		{"retries without attempts disables retries, as Istio reads it", meta + "spec: {hosts: [payments], http: [{retries: {perTryTimeout: 2s}}]}",
			"payments", true, 1},
		{"retries.attempts 4 makes five attempts", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 4}}]}",
			"payments", true, 5},
		{"retries: null reads as unset", meta + "spec: {hosts: [payments], http: [{retries: null}]}",
			"payments", true, 3},
		{"the worst route counts", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 1}}, {retries: {attempts: 5}}, {retries: {attempts: 0}}]}",
			"payments", true, 6},
		{"name.ns", meta + "spec: {hosts: [payments.shop], http: [{retries: {attempts: 1}}]}", "payments", true, 2},
		{"name.ns.svc", meta + "spec: {hosts: [payments.shop.svc], http: [{retries: {attempts: 1}}]}", "payments", true, 2},
		{"the full name, upper case, with a trailing dot", meta + "spec: {hosts: [PAYMENTS.shop.svc.cluster.local.], http: [{retries: {attempts: 1}}]}",
			"payments", true, 2},
		{"a wildcard over the namespace", meta + "spec: {hosts: ['*.shop.svc.cluster.local'], http: [{}]}", "payments", true, 3},
		{"the mesh-wide wildcard", meta + "spec: {hosts: ['*'], http: [{}]}", "payments", true, 3},
		{"a wildcard over another namespace", meta + "spec: {hosts: ['*.other.svc.cluster.local'], http: [{}]}", "payments", false, 1},
		{"another service", meta + "spec: {hosts: [ledger], http: [{route: [{destination: {host: ledger}}]}]}", "payments", false, 1},
		{"a prefix of the name is another service", meta + "spec: {hosts: [pay], http: [{}]}", "payments", false, 1},
		{"the same name in another namespace", meta + "spec: {hosts: [payments.other.svc.cluster.local], http: [{}]}", "payments", false, 1},
		{"a short name resolves in the VirtualService's namespace",
			"metadata: {name: x, namespace: other}\nspec: {hosts: [payments], http: [{}]}", "payments", false, 1},
		{"a route's destination: only that route counts", meta + `spec:
  hosts: [api.example.com]
  http:
  - retries: {attempts: 7}
    route: [{destination: {host: ledger}}]
  - retries: {attempts: 2}
    route: [{destination: {host: ledger}}, {destination: {host: payments.shop.svc.cluster.local}}]`,
			"payments", true, 3},
		{"routed but only over TCP: nothing retries", meta + "spec: {hosts: [payments], tcp: [{route: [{destination: {host: payments}}]}]}",
			"payments", true, 1},
		{"bound to an ingress gateway only: not mesh traffic", meta + "spec: {hosts: [payments], gateways: [shop/ingress], http: [{}]}",
			"payments", true, 1},
		{"bound to the mesh and a gateway", meta + "spec: {hosts: [payments], gateways: [shop/ingress, mesh], http: [{}]}",
			"payments", true, 3},
		{"a match's gateways override the VirtualService's", meta + `spec:
  hosts: [payments]
  gateways: [shop/ingress]
  http:
  - match: [{gateways: [mesh]}]
    retries: {attempts: 3}
  - retries: {attempts: 8}`,
			"payments", true, 4},
		{"a match for gateways only", meta + `spec:
  hosts: [payments]
  http:
  - match: [{gateways: [shop/ingress]}]
    retries: {attempts: 8}
  - match: [{uri: {prefix: /v1}}]
    retries: {attempts: 1}`,
			"payments", true, 2},
		{"exported to its own namespace", meta + "spec: {hosts: [payments], exportTo: ['.'], http: [{}]}", "payments", true, 3},
		{"exported elsewhere only: the namespace's sidecars do not see it", meta + "spec: {hosts: [payments], exportTo: [other], http: [{}]}",
			"payments", false, 1},
		{"from another namespace, by FQDN, exported everywhere by default", other + "spec: {hosts: [payments.shop.svc.cluster.local], http: [{retries: " +
			"{attempts: 5}}]}",
			"payments", true, 6},
		{"from another namespace, by svc.ns", other + "spec: {hosts: [payments.shop], http: [{}]}", "payments", true, 3},
		{"from another namespace, exported to the policy's", other + "spec: {hosts: [payments.shop.svc.cluster.local], exportTo: [shop], http: [{}]}",
			"payments", true, 3},
		{"from another namespace, exported to its own only ('.'): invisible here",
			other + "spec: {hosts: [payments.shop.svc.cluster.local], exportTo: ['.'], http: [{}]}", "payments", false, 1},
		{"from another namespace, a short name resolves there, not here", other + "spec: {hosts: [payments], http: [{}]}", "payments", false, 1},
		// A wildcard of another namespace would let any tenant's one VirtualService reach every
		// policy of the cluster (docs/hidden-layers.md, any namespace, as exported): it does not count.
		// Nor does a route of another namespace's VirtualService that only sends its own host's calls to
		// the service, or a delegate (no hosts), which Istio applies only through a root that names the host.
		{"from another namespace, a route to the service from another host", other +
			"spec: {hosts: [front.team-b.svc.cluster.local], http: [{route: [{destination: {host: payments.shop.svc.cluster.local}}]}]}",
			"payments", false, 1},
		{"from another namespace, a delegate", other + "spec: {http: [{route: [{destination: {host: payments.shop.svc.cluster.local}}]}]}",
			"payments", false, 1},
		{"from another namespace, the mesh-wide wildcard", other + "spec: {hosts: ['*'], http: [{}]}", "payments", false, 1},
		{"from another namespace, a wildcard over the policy's namespace", other + "spec: {hosts: ['*.shop.svc.cluster.local'], http: [{}]}",
			"payments", false, 1},
		{"from another namespace, a wildcard over every service", other + "spec: {hosts: ['*.svc.cluster.local'], exportTo: [shop], http: [{}]}",
			"payments", false, 1},
		{"huge attempts saturate", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 99999999999}}]}",
			"payments", true, math.MaxInt32},
		{"negative attempts disable retries", meta + "spec: {hosts: [payments], http: [{retries: {attempts: -3}}]}",
			"payments", true, 1},
		{"attempts of the wrong type count as the default", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 'five'}}]}",
			"payments", true, 3},
		{"attempts with a fraction count as the default", meta + "spec: {hosts: [payments], http: [{retries: {attempts: 1.5}}]}",
			"payments", true, 3},
		{"retries of the wrong type count as the default", meta + "spec: {hosts: [payments], http: [{retries: 2}]}",
			"payments", true, 3},
		{"hosts of the wrong type", meta + "spec: {hosts: payments, http: [{}]}", "payments", false, 1},
		{"http of the wrong type", meta + "spec: {hosts: [payments], http: {retries: {attempts: 5}}}", "payments", true, 1},
		{"no spec", meta, "payments", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RoutingOf(vs(t, tc.doc), tc.service, "shop")
			if got.Routes != tc.routes || got.Attempts != tc.attempts {
				t.Errorf("RoutingOf = %+v, want routes %v attempts %d", got, tc.routes, tc.attempts)
			}
		})
	}
}

// FuzzRoutingOf feeds arbitrary JSON as a VirtualService's content: the
// function never panics, never counts fewer than one attempt, and counts
// nothing for a service it does not route.
func FuzzRoutingOf(f *testing.F) {
	f.Add([]byte(`{"spec":{"hosts":["payments"],"http":[{"retries":{"attempts":2}}]}}`), "payments", "shop")
	f.Add(
		[]byte(
			`{"metadata":{"namespace":7},"spec":{"hosts":[1,"*"],"gateways":"mesh","exportTo":[null],"http":[null,{"match":[1,{"gateways":5}],`+
				`"route":[{"destination":"x"},{"destination":{"host":3}}],"retries":{"attempts":1e300}}]}}`,
		),
		"a",
		"b",
	)
	f.Add([]byte(`{"spec":{"hosts":["*."],"http":[{"retries":{"attempts":-1e300}}]}}`), "", "")
	f.Add([]byte(`[]`), "a", "b")
	f.Fuzz(func(t *testing.T, data []byte, service, namespace string) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		got := RoutingOf(obj, service, namespace)
		if got.Attempts < 1 {
			t.Fatalf("attempts %d < 1", got.Attempts)
		}
		if !got.Routes && got.Attempts != 1 {
			t.Fatalf("%d attempts counted for a service it does not route", got.Attempts)
		}
	})
}
