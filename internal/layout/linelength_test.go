package layout

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxLineLength is the longest line of hand-written Go the guide allows.
const maxLineLength = 160

// generatedHeader is the Go convention for a generated file
// (https://go.dev/s/generatedcode).
var generatedHeader = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// markerLine is a controller-tools marker. controller-gen reads each marker
// from one // comment (sigs.k8s.io/controller-tools pkg/markers/collect.go,
// isMarkerComment), so a marker cannot be wrapped: a long CEL rule is held
// to one rule per +kubebuilder:validation:XValidation instead.
var markerLine = regexp.MustCompile(`^\s*// \+kubebuilder:`)

// No line of hand-written Go is longer than 160 characters, tests and tools
// included; a marker line is exempt only when it holds a single marker, a
// CEL marker a single rule.
func TestNoGoLineIsOver160Characters(t *testing.T) {
	checked := 0
	goFiles(t, func(rel, path string) {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if generatedHeader.Match(src) {
			return
		}
		checked++
		sc := bufio.NewScanner(bytes.NewReader(src))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if utf8.RuneCountInString(line) <= maxLineLength {
				continue
			}
			if markerLine.MatchString(line) {
				if strings.Count(line, "+kubebuilder:") > 1 || strings.Count(line, "rule=") > 1 {
					t.Errorf("%s:%d: a marker line holds more than one marker or rule; give each its own line", rel, n)
				}
				continue
			}
			t.Errorf("%s:%d: %d characters, over %d", rel, n, utf8.RuneCountInString(line), maxLineLength)
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
	})
	if checked < 100 {
		t.Fatalf("checked only %d Go files", checked)
	}
}
