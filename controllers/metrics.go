package controllers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// policyMetrics counts RetryPolicies by Ready status and reason, next to the
// controller-runtime metrics (reconcile totals, durations, queue depth) on
// the manager's metrics endpoint.
var policyMetrics = newReadyGauge()

type readyGauge struct {
	mu    sync.Mutex
	last  map[string][2]string // policy → {status, reason}
	gauge *prometheus.GaugeVec
}

func newReadyGauge() *readyGauge {
	g := &readyGauge{
		last: map[string][2]string{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retryguard_retrypolicies",
			Help: "RetryPolicies by Ready status and reason; reason is a small fixed set.",
		}, []string{"ready", "reason"}),
	}
	metrics.Registry.MustRegister(g.gauge)
	return g
}

func (g *readyGauge) set(key, status, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := [2]string{status, reason}
	if old, ok := g.last[key]; ok {
		if old == now {
			return
		}
		g.gauge.WithLabelValues(old[0], old[1]).Dec()
	}
	g.last[key] = now
	g.gauge.WithLabelValues(status, reason).Inc()
}

func (g *readyGauge) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.last[key]; ok {
		g.gauge.WithLabelValues(old[0], old[1]).Dec()
		delete(g.last, key)
	}
}
