package retry

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// Pools is a registry of named, isolated connection pools: one
// http.Transport per pool, sized by the policy's maxConnections. A pool
// belongs to the first criticality and service that asks for it; any other
// gets ERR_SHARED_FAILURE_DOMAIN_LEAK, so that a marketing caller can never
// borrow 2FA's connections. It is safe for concurrent use.
type Pools struct {
	mu    sync.Mutex
	pools map[string]*pool
	// New builds a pool's transport; nil clones http.DefaultTransport.
	New func(maxConnections int) *http.Transport
}

type pool struct {
	transport   *http.Transport
	criticality string
	service     string
}

// Transport returns the pool the policy names, creating it on first use.
func (ps *Pools) Transport(p *policyconfig.Policy) (*http.Transport, error) {
	cp := p.ConnectionPool
	if cp == nil {
		return nil, fmt.Errorf("retryguard: policy %s names no connection pool", p.Name)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.pools == nil {
		ps.pools = map[string]*pool{}
	}
	if existing, ok := ps.pools[cp.Name]; ok {
		if existing.criticality != p.Criticality || existing.service != p.Service {
			return nil, &Error{Code: codes.SharedFailureDomainLeak, Policy: p.Name, Detail: fmt.Sprintf(
				"pool %s belongs to %s callers of %s; a %s caller of %s may not borrow it",
				cp.Name, existing.criticality, existing.service, p.Criticality, p.Service)}
		}
		return existing.transport, nil
	}
	var t *http.Transport
	if ps.New != nil {
		t = ps.New(int(cp.MaxConnections))
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
		t.MaxConnsPerHost = int(cp.MaxConnections)
		t.MaxIdleConnsPerHost = int(cp.MaxConnections)
	}
	ps.pools[cp.Name] = &pool{transport: t, criticality: p.Criticality, service: p.Service}
	return t, nil
}

// CloseIdleConnections closes every pool's idle connections.
func (ps *Pools) CloseIdleConnections() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pools {
		p.transport.CloseIdleConnections()
	}
}

// Fallback returns the named fallback channel of a policy, refusing any
// channel that is not https and verified with
// ERR_UNTESTED_COMPENSATION_BLOCKED, even when a payload was tampered with.
func (e *Executor) Fallback(policy, channel string) (policyconfig.FallbackChannel, error) {
	blocked := func(detail string) error {
		return &Error{Code: codes.UntestedCompensationBlocked, Policy: policy, Detail: detail}
	}
	p, ok := e.source.Policy(policy)
	if !ok {
		return policyconfig.FallbackChannel{}, blocked("the policy is not published")
	}
	for _, c := range p.Policy.Fallback {
		if c.Name != channel {
			continue
		}
		if !c.Verified || !httprules.IsSecureEndpoint(c.Endpoint) {
			return policyconfig.FallbackChannel{}, blocked(fmt.Sprintf("channel %s (%s) is not a verified https endpoint", c.Name, c.Endpoint))
		}
		return c, nil
	}
	return policyconfig.FallbackChannel{}, blocked("the policy lists no channel " + channel)
}
