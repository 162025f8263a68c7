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
	f.Add([]byte("apiVersion: v1\nkind: A\n--- {kind: B}\n---\nkind: C\nkind: C\n"))
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

// lineOf is the 1-based line of the first occurrence of s in raw.
func lineOf(t *testing.T, raw, s string) int {
	t.Helper()
	i := strings.Index(raw, s)
	if i < 0 {
		t.Fatalf("%q not in the file", s)
	}
	return strings.Count(raw[:i], "\n") + 1
}

// A file is read as kubectl reads it (apimachinery's YAML reader): a document
// written on its "---" line is not a document but an error, where it stands in
// the file. The reader drops the document that line would end, and kubectl
// reads no further; the documents before it are kept.
func TestSplitRefusesADocumentOnItsSeparatorLine(t *testing.T) {
	for name, sep := range map[string]string{
		"flow mapping":    "--- {apiVersion: policy.retryguard.io/v1alpha1, kind: RetryPolicy, metadata: {name: x}}",
		"block mapping":   "--- apiVersion: v1",
		"no space":        "---{apiVersion: v1, kind: Namespace}",
		"a fourth dash":   "----",
		"windows newline": "--- kind: Namespace\r",
	} {
		t.Run(name, func(t *testing.T) {
			raw := "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n" + sep + "\n"
			docs := manifest.Split("f.yaml", []byte(raw))
			if len(docs) != 2 || docs[0].Err != nil || docs[0].Name != "a" {
				t.Fatalf("want the first document and the error, got %+v", docs)
			}
			bad := docs[1]
			if bad.Err == nil || bad.Line != lineOf(t, raw, sep) || !strings.Contains(bad.Err.Error(), "separator") {
				t.Fatalf("want an error at line %d naming the separator, got line %d: %v", lineOf(t, raw, sep), bad.Line, bad.Err)
			}
		})
	}
	// What is not a separator: "---" then blanks or a comment.
	raw := "--- # first\napiVersion: v1\nkind: Namespace\n---\t\napiVersion: v1\nkind: ConfigMap\n---\r\napiVersion: v1\nkind: Secret\n"
	var got []string
	for _, d := range manifest.Split("f.yaml", []byte(raw)) {
		got = append(got, fmt.Sprintf("%s %s %v", d.Where(), d.Kind, d.Err))
	}
	if want := []string{"f.yaml:2 Namespace <nil>", "f.yaml:5 ConfigMap <nil>", "f.yaml:8 Secret <nil>"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A duplicated field is refused (kubectl's --validate=strict), and so is a
// syntax error; the error names the line in the file, not in the document.
func TestSplitRefusesDuplicateFieldsAtTheirLineInTheFile(t *testing.T) {
	raw := `apiVersion: v1
kind: Namespace
metadata: {name: a}
---
# a comment
apiVersion: policy.retryguard.io/v1alpha1
kind: RetryPolicy
metadata: {name: p}
spec:
  maxAttempts: 5
  deadline: 10s
  maxAttempts: 1
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, name: d}
---
apiVersion: v1
kind: ConfigMap
data:
  k: [unclosed
`
	docs := manifest.Split("f.yaml", []byte(raw))
	if len(docs) != 4 || docs[0].Err != nil {
		t.Fatalf("want 4 documents, the first fine: %+v", docs)
	}
	for i, want := range map[int]string{
		1: fmt.Sprintf(`line %d: key "maxAttempts" already set`, lineOf(t, raw, "  maxAttempts: 1")),
		2: fmt.Sprintf(`line %d: key "name" already set`, lineOf(t, raw, "metadata: {name: c")),
		3: fmt.Sprintf("line %d:", lineOf(t, raw, "  k: [unclosed")),
	} {
		if d := docs[i]; d.Err == nil || !strings.Contains(d.Err.Error(), want) {
			t.Errorf("document %d (line %d): want an error with %q, got %v", i, d.Line, want, d.Err)
		}
	}
	if docs[1].Line != 5 {
		t.Errorf("the policy starts on line 5 (its comment), got %d", docs[1].Line)
	}
}
