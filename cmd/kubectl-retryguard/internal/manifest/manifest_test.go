package manifest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
)

func TestSplitKeepsOrderAndLines(t *testing.T) {
	raw := `# a leading comment
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
# only a comment: dropped
---
apiVersion: v1
kind: Namespace
metadata: {name: b}
--- 
{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "c"}}
---
kind: [unclosed
`
	docs := manifest.Split("f.yaml", []byte(raw))
	var got []string
	for _, d := range docs {
		got = append(got, d.Where()+" "+d.Kind)
	}
	want := []string{"f.yaml:1 Namespace", "f.yaml:8 Namespace", "f.yaml:12 Namespace", "f.yaml:14 "}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if docs[3].Err == nil || docs[2].Err != nil {
		t.Errorf("errors: %v, %v", docs[2].Err, docs[3].Err)
	}
	if missing := manifest.Split("g.yaml", []byte("metadata: {name: x}\n")); len(missing) != 1 || missing[0].Err == nil {
		t.Errorf("a document without apiVersion and kind must carry an error: %+v", missing)
	}
}

// `kubectl get rp -o yaml` prints a v1 List; its items are the documents.
func TestSplitExpandsLists(t *testing.T) {
	raw := `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: a}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: c}
`
	var got []string
	for _, d := range manifest.Split("f.yaml", []byte(raw)) {
		got = append(got, fmt.Sprintf("%s %s %s/%s", d.Where(), d.Kind, d.Namespace, d.Name))
	}
	want := []string{"f.yaml:1 Namespace /a", "f.yaml:1 ConfigMap a/b", "f.yaml:7 Namespace /c"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLoadWalksDirectoriesInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, kind string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: "+kind+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "B")
	write("a.yml", "A")
	write("sub/c.json", "C")
	write("notes.txt", "Ignored")
	write("kustomization.yaml", "Kustomization")
	write("z.YAML", "Z")
	docs, err := manifest.Load([]string{dir, filepath.Join(dir, "notes.txt"), "-"}, strings.NewReader("apiVersion: v1\nkind: Stdin\n"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d.Kind)
	}
	// The directory in lexical order (kustomization and .txt left out), then
	// the file named explicitly whatever its extension, then standard input.
	if want := []string{"A", "B", "C", "Z", "Ignored", "Stdin"}; !slices.Equal(kinds, want) {
		t.Fatalf("got %q, want %q", kinds, want)
	}
	if _, err := manifest.Load([]string{filepath.Join(dir, "absent.yaml")}, nil); err == nil {
		t.Error("a missing path must be an error")
	}
}

// FuzzSplit: any bytes split into documents in line order (a List's items
// share its line), each
// either an object with apiVersion, kind and valid JSON, or an error.
func FuzzSplit(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# c\n---\nkind: [\n"))
	f.Add([]byte("--- \n{\"apiVersion\": \"v1\", \"kind\": \"X\"}\n---\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		last := 0
		for _, d := range manifest.Split("f", raw) {
			if d.Line < last || d.Line < 1 {
				t.Fatalf("line %d after %d", d.Line, last)
			}
			last = d.Line
			if d.Err == nil && (d.APIVersion == "" || d.Kind == "" || !json.Valid(d.JSON)) {
				t.Fatalf("document at line %d: %q %q %q", d.Line, d.APIVersion, d.Kind, d.JSON)
			}
		}
	})
}
