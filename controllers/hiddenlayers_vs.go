package controllers

import (
	"math"
	"slices"
	"strings"
)

// Istio's VirtualService, read as unstructured content so that Istio is not
// a Go dependency of the operator.
const (
	// IstioNetworkingGroup is the API group of Istio's VirtualService.
	IstioNetworkingGroup = "networking.istio.io"
	// VirtualServiceKind is the kind the controller looks for.
	VirtualServiceKind = "VirtualService"
	// VirtualServiceCRDName is the CustomResourceDefinition that serves it.
	VirtualServiceCRDName = "virtualservices." + IstioNetworkingGroup

	// IstioDefaultRetries is the number of retries Istio's sidecar makes
	// on a route whose VirtualService sets no retries: "The default retry
	// behavior for HTTP requests is to retry twice before returning the
	// error" (https://istio.io/latest/docs/concepts/traffic-management/#retries;
	// Envoy's route config then shows num_retries: 2). A mesh can change it
	// with meshConfig.defaultHttpRetryPolicy, which the controller cannot
	// see: it counts Istio's documented default.
	IstioDefaultRetries = int32(2)

	// ClusterDomain is the DNS suffix a short host name expands to.
	ClusterDomain = "cluster.local"

	// meshGateway is the reserved gateway name of the sidecars.
	meshGateway = "mesh"
)

// VirtualServiceVersions are the served versions of networking.istio.io
// the controller reads, newest first; it reads the newest one served.
var VirtualServiceVersions = []string{"v1", "v1beta1", "v1alpha3"}

// VirtualServiceRouting is what one VirtualService does to the calls one
// service receives from the sidecars of its namespace.
type VirtualServiceRouting struct {
	// Routes says whether the VirtualService routes the service at all: a
	// host names it, or an HTTP route sends traffic to it.
	Routes bool
	// Attempts is what the worst HTTP route that applies makes for each
	// call it is given, the first included: 1 + retries.attempts, Istio's
	// default when retries is unset, 1 when retries.attempts is 0. 1 when no
	// HTTP route applies (TCP and TLS routes do not retry).
	Attempts int32
}

// RoutingOf reads a VirtualService's unstructured content (as a dynamic
// client or an unstructured cache returns it) and says how it treats calls
// to service in namespace. It is a pure function of its input and never
// panics on malformed content: a field of the wrong type counts as absent,
// except retries, where anything Istio would not read as "disabled" counts
// as Istio's default, so a doubt means more attempts counted, never fewer.
//
// Scope, chosen for mesh traffic (the calls a policy's pods make through
// their sidecars):
//   - Host names are resolved as Istio does for Kubernetes, relative to the
//     VirtualService's namespace: "svc", "svc.ns", "svc.ns.svc" and
//     "svc.ns.svc.cluster.local" all name the service, and so do the
//     wildcards "*" and "*.<suffix>" whose suffix ends its full name, in a
//     VirtualService of the service's own namespace only.
//   - A VirtualService whose hosts name the service applies every HTTP
//     route (which one a call takes depends on its headers and path, so
//     the worst counts). One of the policy's namespace whose hosts do not,
//     but whose HTTP route sends traffic to the service
//     (route[].destination.host), applies only that route.
//   - gateways: a VirtualService bound only to gateways other than "mesh"
//     does not reach the sidecars; an http[].match[].gateways list
//     overrides it for that match, as in Istio.
//   - exportTo: a VirtualService applies to the sidecars of namespace only
//     when it is exported there: unset or "*" (every namespace), the
//     namespace's name, or "." when the VirtualService is in namespace. So a
//     VirtualService in another namespace (the service owner's, say) counts
//     when it names the service by a host that resolves to it, such as its
//     FQDN, and is exported to the policy's namespace.
func RoutingOf(obj map[string]any, service, namespace string) VirtualServiceRouting {
	none := VirtualServiceRouting{Attempts: 1}
	spec, ok := obj["spec"].(map[string]any)
	if !ok || service == "" || namespace == "" {
		return none
	}
	vsNamespace := namespace
	if md, ok := obj["metadata"].(map[string]any); ok {
		if ns, ok := md["namespace"].(string); ok && ns != "" {
			vsNamespace = ns
		}
	}
	if !exportedTo(stringsAt(spec, "exportTo"), vsNamespace, namespace) {
		return none
	}
	target := hostName{service: strings.ToLower(service), namespace: strings.ToLower(namespace)}
	names := func(host string) bool { return target.namedBy(host, vsNamespace) }

	hostsName := slices.ContainsFunc(stringsAt(spec, "hosts"), names)
	gateways := stringsAt(spec, "gateways")
	meshByDefault := len(gateways) == 0 || containsAny(gateways, meshGateway)

	out := none
	out.Routes = hostsName
	routes, _ := spec["http"].([]any)
	for _, r := range routes {
		route, ok := r.(map[string]any)
		if !ok {
			continue
		}
		// Only a route of the policy's own namespace counts by its destination: elsewhere it carries
		// calls to that VirtualService's own hosts (or, host-less, is a delegate Istio applies only
		// through a root), so a tenant's route to the service would switch off a policy it never reaches.
		sendsToService := strings.EqualFold(vsNamespace, namespace) && routeSendsTo(route, names)
		out.Routes = out.Routes || sendsToService
		if !(hostsName || sendsToService) || !reachesMesh(route, meshByDefault) {
			continue
		}
		out.Attempts = max(out.Attempts, routeAttempts(route))
	}
	return out
}

// exportedTo says whether a VirtualService of vsNamespace with this
// exportTo list applies to the sidecars of namespace. Unset is Istio's
// default, every namespace.
func exportedTo(exportTo []string, vsNamespace, namespace string) bool {
	if len(exportTo) == 0 || containsAny(exportTo, "*", namespace) {
		return true
	}
	return vsNamespace == namespace && containsAny(exportTo, ".")
}

// routeAttempts is what one HTTP route makes per call, the first included.
func routeAttempts(route map[string]any) int32 {
	raw, present := route["retries"]
	if !present || raw == nil {
		return 1 + IstioDefaultRetries
	}
	retries, ok := raw.(map[string]any)
	if !ok {
		return 1 + IstioDefaultRetries
	}
	attempts, present := retries["attempts"]
	if !present || attempts == nil {
		// Istio reads a retries block without attempts as attempts 0:
		// retries disabled.
		return 1
	}
	n, ok := wholeNumber(attempts)
	switch {
	case !ok:
		return 1 + IstioDefaultRetries
	case n <= 0:
		return 1
	case n >= math.MaxInt32-1:
		return math.MaxInt32
	}
	return int32(n) + 1
}

// wholeNumber reads an integer as JSON decoding into unstructured content
// produces it (int64, or float64 for a number written with a fraction).
func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		if n != math.Trunc(n) || math.IsInf(n, 0) || math.IsNaN(n) {
			return 0, false
		}
		if n >= math.MaxInt32 {
			return math.MaxInt32, true
		}
		if n <= math.MinInt32 {
			return math.MinInt32, true
		}
		return int64(n), true
	}
	return 0, false
}

// routeSendsTo says whether one of the route's destinations is named.
func routeSendsTo(route map[string]any, names func(string) bool) bool {
	dests, _ := route["route"].([]any)
	for _, d := range dests {
		dest, ok := d.(map[string]any)
		if !ok {
			continue
		}
		if inner, ok := dest["destination"].(map[string]any); ok {
			if host, ok := inner["host"].(string); ok && names(host) {
				return true
			}
		}
	}
	return false
}

// reachesMesh says whether the sidecars apply the route: a match without
// gateways inherits the VirtualService's, a match with gateways needs
// "mesh" among them; a route without matches takes the VirtualService's.
func reachesMesh(route map[string]any, meshByDefault bool) bool {
	matches, _ := route["match"].([]any)
	if len(matches) == 0 {
		return meshByDefault
	}
	for _, m := range matches {
		match, ok := m.(map[string]any)
		if !ok {
			if meshByDefault {
				return true
			}
			continue
		}
		gateways := stringsAt(match, "gateways")
		if (len(gateways) == 0 && meshByDefault) || containsAny(gateways, meshGateway) {
			return true
		}
	}
	return false
}

// hostName is a Kubernetes service as Istio host names refer to it.
type hostName struct{ service, namespace string }

// namedBy says whether host, written in a VirtualService of vsNamespace,
// names the service. A wildcard names it only from the service's own
// namespace: from any other, one VirtualService would reach the policies of
// every namespace it covers (docs/hidden-layers.md, any namespace, as
// exported).
func (h hostName) namedBy(host, vsNamespace string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	fqdn := h.service + "." + h.namespace + ".svc." + ClusterDomain
	wildcardHere := strings.EqualFold(vsNamespace, h.namespace)
	switch {
	case host == "*":
		return wildcardHere
	case strings.HasPrefix(host, "*."):
		return wildcardHere && strings.HasSuffix(fqdn, host[1:])
	case host == h.service:
		return strings.EqualFold(vsNamespace, h.namespace)
	}
	return host == h.service+"."+h.namespace || host == h.service+"."+h.namespace+".svc" || host == fqdn
}

// stringsAt reads a list of strings, skipping entries of another type.
func stringsAt(m map[string]any, key string) []string {
	list, _ := m[key].([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func containsAny(list []string, want ...string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return slices.Contains(want, s) })
}
