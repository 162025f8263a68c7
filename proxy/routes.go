// Package proxy is retryguard-proxy's core: a local egress proxy that sends
// each request an application makes to localhost through the runtime's
// retry.RoundTripper, under the policy its route names, to the route's
// upstream (docs/proxy.md). It imports the runtime and nothing of the
// operator, so the sidecar's binary links none of the operator's
// dependencies (TestTheProxyLinksNoOperatorPackage).
package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// RoutesAnnotation holds a pod's route table, the JSON Parse reads. The
// injector mounts it into the sidecar through the downward API, so the
// table is the pod's own and changes with it.
const RoutesAnnotation = "retryguard.io/routes"

// Route table bounds.
const (
	// MaxRoutes bounds a table: an annotation is small, and every route is
	// one more listener or prefix to match.
	MaxRoutes = 32
	// MinPort is the lowest port a route may listen on: the sidecar runs
	// as a non-root user, which cannot bind below it.
	MinPort = 1024
	// MaxPathPrefix bounds a prefix, in bytes.
	MaxPathPrefix = 256
	// MaxUpstream bounds an upstream URL, in bytes.
	MaxUpstream = 2048
	// MaxTableBytes bounds the table's JSON: an annotation's whole budget.
	MaxTableBytes = 256 << 10
)

// MemoryLimit is the injected sidecar's memory limit, in bytes: the
// injector sets it on the container and GOMEMLIMIT from it, and
// BenchmarkSidecarUnderAThousandConnections holds the binary's peak RSS
// below it.
const MemoryLimit = 128 << 20

// The sidecar's own ports; no route may listen on either.
const (
	// DefaultAdminPort is where the sidecar serves /deadletters, /policies,
	// /healthz and /readyz, on 127.0.0.1 only: the pod's own containers
	// read its letters, no other pod can.
	DefaultAdminPort = 15020
	// DefaultMetricsPort is where it serves /metrics for scraping, and
	// /healthz and /readyz for the kubelet's probes, on every address.
	DefaultMetricsPort = 15090
)

// Table is a route table: which policy and upstream each local port and path
// prefix goes to.
type Table struct {
	Routes []Route `json:"routes"`
}

// Route sends the requests that reach Port on localhost, whose path starts
// with PathPrefix, to Upstream under Policy.
type Route struct {
	// Port is the local port the application sends plain HTTP to.
	Port int `json:"port"`
	// PathPrefix selects requests by path, segment by segment ("/v1"
	// matches /v1 and /v1/messages, not /v10); "/" when empty. The longest
	// matching prefix of a port wins.
	PathPrefix string `json:"pathPrefix,omitempty"`
	// Policy is the RetryPolicy of the pod's namespace that governs the calls.
	Policy string `json:"policy"`
	// Upstream is the dependency's base URL: https (the proxy originates
	// TLS) or http, a host, an optional base path and nothing else. The
	// request's path is appended to it whole, the prefix included.
	Upstream string `json:"upstream"`
}

// RouteError is a route table the proxy refuses: the field, the rule and the
// code (codes.InvalidRoute, or codes.OutOfRange for a bound).
type RouteError struct {
	Field string
	Code  codes.Code
	Rule  string
}

func (e *RouteError) Error() string { return e.Field + ": " + e.Code.Message(e.Rule) }

// ErrInvalidRoutes is matched by every *RouteError.
var ErrInvalidRoutes = errors.New("invalid route table")

// Is matches ErrInvalidRoutes.
func (e *RouteError) Is(target error) bool { return target == ErrInvalidRoutes }

var (
	objectName = regexp.MustCompile(limits.DNS1123SubdomainPattern)
	// A prefix is a path of RFC 3986 pchars, no dot segment, no escapes:
	// what it matches must be what the upstream receives.
	pathPrefix = regexp.MustCompile(`^/([A-Za-z0-9._~!$&'()*+,;=:@-]+(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)*/?)?$`)
)

// Parse reads a route table strictly (unknown fields, trailing data and
// every rule of Validate are refused) and returns it with its defaults.
func Parse(data []byte) (*Table, error) {
	if len(data) > MaxTableBytes {
		return nil, &RouteError{Field: "routes", Code: codes.OutOfRange, Rule: fmt.Sprintf("the table is %d bytes, above %d", len(data), MaxTableBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Table
	if err := dec.Decode(&t); err != nil {
		return nil, &RouteError{Field: "routes", Code: codes.InvalidRoute, Rule: "not a route table: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &RouteError{Field: "routes", Code: codes.InvalidRoute, Rule: "trailing data after the table"}
	}
	for i := range t.Routes {
		if t.Routes[i].PathPrefix == "" {
			t.Routes[i].PathPrefix = "/"
		}
	}
	if err := t.Validate(DefaultAdminPort, DefaultMetricsPort); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate checks every route: a port from MinPort up that is none of the
// proxy's own (reserved: its admin and metrics ports), a prefix that is a clean path, a policy that is an object name, an
// http or https upstream with a host and nothing but a base path, and no two
// routes on the same port and prefix.
func (t *Table) Validate(reserved ...int) error {
	if len(t.Routes) == 0 {
		return &RouteError{Field: "routes", Code: codes.InvalidRoute, Rule: "at least one route is required"}
	}
	if len(t.Routes) > MaxRoutes {
		return &RouteError{Field: "routes", Code: codes.OutOfRange, Rule: fmt.Sprintf("%d routes, above %d", len(t.Routes), MaxRoutes)}
	}
	for i, r := range t.Routes {
		field := func(name string) string { return "routes[" + strconv.Itoa(i) + "]." + name }
		if err := r.validate(field, reserved); err != nil {
			return err
		}
		if slices.ContainsFunc(t.Routes[:i], func(o Route) bool { return o.Port == r.Port && o.PathPrefix == r.PathPrefix }) {
			return &RouteError{Field: field("pathPrefix"), Code: codes.InvalidRoute,
				Rule: fmt.Sprintf("port %d and prefix %q are routed twice", r.Port, r.PathPrefix)}
		}
	}
	return nil
}

func (r Route) validate(field func(string) string, reserved []int) error {
	switch {
	case r.Port < MinPort || r.Port > 65535:
		return &RouteError{Field: field("port"), Code: codes.OutOfRange, Rule: fmt.Sprintf("%d is outside %d–65535", r.Port, MinPort)}
	case slices.Contains(reserved, r.Port):
		return &RouteError{Field: field("port"), Code: codes.InvalidRoute, Rule: fmt.Sprintf("%d is one of the proxy's own ports %v", r.Port, reserved)}
	case len(r.PathPrefix) > MaxPathPrefix:
		return &RouteError{Field: field("pathPrefix"), Code: codes.OutOfRange, Rule: fmt.Sprintf("%d bytes, above %d", len(r.PathPrefix), MaxPathPrefix)}
	case !pathPrefix.MatchString(r.PathPrefix) || hasDotSegment(r.PathPrefix):
		return &RouteError{Field: field("pathPrefix"), Code: codes.InvalidRoute,
			Rule: fmt.Sprintf("%q is not a clean absolute path (unreserved characters, no empty or dot segment, no escape)", r.PathPrefix)}
	case r.Policy == "":
		return &RouteError{Field: field("policy"), Code: codes.InvalidRoute, Rule: "required"}
	case len(policyconfig.ConfigMapName(r.Policy)) > limits.MaxObjectNameLength || !objectName.MatchString(r.Policy):
		return &RouteError{Field: field("policy"), Code: codes.InvalidRoute, Rule: fmt.Sprintf("%q is not a RetryPolicy name", r.Policy)}
	}
	if _, err := upstreamURL(r.Upstream); err != nil {
		return &RouteError{Field: field("upstream"), Code: codes.InvalidRoute, Rule: err.Error()}
	}
	return nil
}

func hasDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// upstreamURL parses an upstream: http or https, a host, no user, query or
// fragment; its path loses a trailing slash, so that the request's path is
// appended to it once.
func upstreamURL(s string) (*url.URL, error) {
	if len(s) > MaxUpstream {
		return nil, fmt.Errorf("%d bytes, above %d", len(s), MaxUpstream)
	}
	u, err := url.Parse(s)
	switch {
	case s == "":
		return nil, errors.New("required")
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("%q: the scheme must be https (or http), not %q", s, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return nil, fmt.Errorf("%q carries credentials: send them in a header the application sets", s)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("%q has a query, fragment or opaque part: an upstream is a base URL", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Ports are the table's distinct ports, in the order the table first names
// them.
func (t *Table) Ports() []int {
	var ports []int
	for _, r := range t.Routes {
		if !slices.Contains(ports, r.Port) {
			ports = append(ports, r.Port)
		}
	}
	return ports
}
