package retry

import (
	"os"
	"strings"
	"testing"
)

// The HTTP integration the README and docs/runtime.md show is
// ExampleRoundTripper's, line for line: the example runs it against a real
// server, so neither copy can drift into code that does not compile or does
// not do what it says.
func TestTheREADMEShowsTheExample(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(example), "// readme:start\n")
	block, _, ok2 := strings.Cut(rest, "\t// readme:end")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no readme:start/readme:end markers")
	}
	var want strings.Builder
	want.WriteString("```go\n")
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	want.WriteString("```\n")
	for _, doc := range []string{"../../README.md", "../../docs/runtime.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), want.String()) {
			t.Errorf("%s does not show ExampleRoundTripper's integration; it should contain:\n%s", doc, want.String())
		}
	}
}
