package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/limits"
)

// Every bound of package limits resolves, with the text a rule states it in.
func TestLimitValuesReadsTheContract(t *testing.T) {
	values, err := limitValues("../../contract/limits")
	if err != nil {
		t.Fatal(err)
	}
	// The constants as the compiler sees them, so that this test states no
	// bound of its own: a bound changed in contract/limits changes both sides.
	for name, want := range map[string]string{
		"MaxAttemptsCeiling": strconv.Itoa(int(limits.MaxAttemptsCeiling)), "MaxHedges": strconv.Itoa(int(limits.MaxHedges)),
		"MinBudgetWindow": durationLiteral(limits.MinBudgetWindow), "MaxBudgetWindow": durationLiteral(limits.MaxBudgetWindow),
		"Timeout": string(limits.Timeout),
	} {
		if got := values[name]; got != want {
			t.Errorf("limits.%s = %q, want %q", name, got, want)
		}
	}
}

func TestSubstitute(t *testing.T) {
	values := map[string]string{"MaxAttemptsCeiling": "3"}
	got, err := substitute("crd.yaml", []byte("---\nrule: self <= ${limits.MaxAttemptsCeiling}\nmessage: between 1 and ${limits.MaxAttemptsCeiling}\n"), values)
	if err != nil || string(got) != "---\nmessage: between 1 and 3\nrule: self <= 3\n" {
		t.Errorf("substitute = %q, %v", got, err)
	}
	_, err = substitute("crd.yaml", []byte("rule: self <= ${limits.MaxAtempts}\n"), values)
	if err == nil || !strings.Contains(err.Error(), "MaxAtempts") {
		t.Errorf("a misspelt name: err %v, want one naming it", err)
	}
	_, err = substitute("crd.yaml", []byte("a: 1\nrule: self <= ${MaxAttemptsCeiling}\n"), values)
	if err == nil || !strings.Contains(err.Error(), "not ${limits.Name}") {
		t.Errorf("a reference without limits.: err %v, want one saying so", err)
	}
}

// The generated CRDs are what controller-gen writes, with no reference left.
func TestTheCRDsAreWritten(t *testing.T) {
	values, err := limitValues("../../contract/limits")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := substitute(f, data, values)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, data) {
			t.Errorf("%s is not as make manifests writes it (a reference left, or not controller-gen's layout)", f)
		}
	}
}

func TestDurationLiteral(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", time.Hour: "1h", time.Minute: "1m", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 500 * time.Millisecond: "500ms",
	} {
		if got := durationLiteral(d); got != want {
			t.Errorf("durationLiteral(%v) = %q, want %q", d, got, want)
		}
	}
}
