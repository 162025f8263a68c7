package layout

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// maxREADMELines bounds the README: what the project is, how to install it,
// the two commands and links. The story is the demo's, the details are the
// pages docs/README.md lists.
const maxREADMELines = 200

func TestTheREADMEIsShort(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page under docs/ and link it", n, maxREADMELines)
	}
}
