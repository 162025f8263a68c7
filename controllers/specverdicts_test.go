package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
)

// A generation's verdict is computed once; a new generation, a new UID (the
// name recreated) or a forgotten name computes it again.
func TestSpecVerdictsAreKeptPerGeneration(t *testing.T) {
	ctx := context.Background()
	var s specVerdicts
	p := fixtures.Policy("ns", "p", "connector", 1)
	p.UID, p.Generation = "u1", 1
	count := func() int {
		errs, err := s.errors(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return len(errs)
	}
	if n := count(); n != 0 {
		t.Fatalf("the fixture refused: %d errors", n)
	}
	p.Spec.MaxAttempts = 5 // the same generation: the remembered verdict stands
	if n := count(); n != 0 {
		t.Fatalf("generation 1 judged again: %d errors", n)
	}
	p.Generation = 2
	if n := count(); n == 0 {
		t.Fatal("generation 2, with maxAttempts 5, admitted")
	}
	p.Spec.MaxAttempts = 1
	p.UID = "u2"
	if n := count(); n != 0 {
		t.Fatalf("a recreated policy kept its predecessor's verdict: %d errors", n)
	}
	s.forget(types.NamespacedName{Namespace: "ns", Name: p.Name})
	if len(s.m) != 0 {
		t.Fatalf("forgotten, still held: %v", s.m)
	}
}
