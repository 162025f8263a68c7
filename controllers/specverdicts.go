package controllers

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/internal/crdvalidation"
)

// specVerdicts remembers the CRD's verdict on each policy's spec, by name,
// for its UID and generation: a generation's spec never changes, and the CRD's rules cost
// milliseconds where a reconcile's own work costs microseconds
// (crdvalidation's BenchmarkValidate), so they are paid once per change,
// not once per resync. The zero value is ready; it is safe for concurrent use.
type specVerdicts struct {
	mu sync.Mutex
	m  map[types.NamespacedName]specVerdict
}

type specVerdict struct {
	uid        types.UID
	generation int64
	errs       field.ErrorList
}

// errors is crdvalidation.Validate(p), remembered.
func (s *specVerdicts) errors(ctx context.Context, p *v1.RetryPolicy) (field.ErrorList, error) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	s.mu.Lock()
	v, ok := s.m[key]
	s.mu.Unlock()
	if ok && v.uid == p.UID && v.generation == p.Generation && p.UID != "" {
		return v.errs, nil
	}
	errs, err := crdvalidation.Validate(ctx, p)
	if err != nil || p.UID == "" {
		return errs, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.NamespacedName]specVerdict{}
	}
	s.m[key] = specVerdict{uid: p.UID, generation: p.Generation, errs: errs}
	return errs, nil
}

// forget drops what is remembered of a deleted policy.
func (s *specVerdicts) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
