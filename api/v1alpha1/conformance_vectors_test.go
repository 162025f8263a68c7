package v1alpha1_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/testenv"
)

var updateVectors = flag.Bool("update-vectors", false, "rewrite conformance/vectors/payload-admission.json from the admission table")

// admissionVectorsFile is the language-neutral copy of the admission table's
// payloads, which every client runs (conformance/README.md).
var admissionVectorsFile = filepath.Join("..", "..", "conformance", "vectors", "payload-admission.json")

type admissionVector struct {
	Name    string          `json:"name"`
	Accept  bool            `json:"accept"`
	Payload json.RawMessage `json:"payload"`
}

// The conformance suite's admission vectors are the admission table,
// published as a pod reads it: each single-object case, its spec published
// by the controller as an Enforced payload, with admission's verdict. A
// case refused only for a field the payload does not carry has no payload
// to judge and is left out. The file is generated, and this test fails when
// it differs from the table (go test ./api/v1alpha1 -run
// TestConformanceAdmissionVectors -update-vectors rewrites it).
func TestConformanceAdmissionVectors(t *testing.T) {
	enforced := policyconfig.Enforcement{Mode: policyconfig.Enforced}
	sample := sampleBudget(t)
	samplePolicy := testenv.Sample[v1.RetryPolicy](t, "policy_v1alpha1_retrypolicy.yaml")
	samplePolicy.Namespace, samplePolicy.Generation = "auth", 1
	var vectors []admissionVector
	add := func(name string, accept bool, payload *policyconfig.Payload) {
		raw, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		vectors = append(vectors, admissionVector{Name: name, Accept: accept, Payload: raw})
	}
	for _, tc := range policyCases {
		if onlyUnpublished(tc.Want) {
			continue
		}
		p := policyFor(t, tc)
		p.Namespace, p.Generation = "auth", 1
		var budget *v1.RetryBudget
		if p.Spec.BudgetRef != nil {
			budget = sample
		}
		add("policy: "+tc.Name, len(tc.Want) == 0, controllers.BuildPayload(p, budget, int64(p.Spec.MaxAttempts), enforced))
	}
	for _, tc := range budgetCases {
		add("budget: "+tc.Name, len(tc.Want) == 0, controllers.BuildPayload(samplePolicy, budgetFor(t, tc), 3, enforced))
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(vectors); err != nil {
		t.Fatal(err)
	}
	if *updateVectors {
		if err := os.WriteFile(admissionVectorsFile, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(admissionVectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s differs from the admission table; regenerate it:\n"+
			"  go test ./api/v1alpha1 -run TestConformanceAdmissionVectors -update-vectors", admissionVectorsFile)
	}
}
