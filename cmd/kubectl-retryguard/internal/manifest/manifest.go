// Package manifest reads Kubernetes manifests from files and directories the
// way `kubectl apply -f` does: directories are walked in lexical order, files
// hold one or more YAML (or JSON) documents separated by "---" lines, and
// documents keep their order.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Extensions are the file name endings read when walking a directory; a
// file named explicitly is read whatever its name.
var Extensions = []string{".yaml", ".yml", ".json"}

// kustomizeFiles are kustomize's own files, skipped when walking a
// directory: they configure a build, they are not objects.
var kustomizeFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// Stdin is the path that reads standard input.
const Stdin = "-"

// Document is one manifest document and where it came from.
type Document struct {
	// Source is the file the document came from ("-" for standard input).
	Source string
	// Line is the 1-based line the document starts on.
	Line int
	// APIVersion and Kind identify the object; both are empty when the
	// document does not parse.
	APIVersion, Kind string
	// Namespace and Name are metadata's, as written (either may be empty).
	Namespace, Name string
	// JSON is the document converted to JSON, ready to decode.
	JSON []byte
	// Err says why the document could not be read as an object.
	Err error
}

// Where renders the document's position as file:line.
func (d Document) Where() string { return fmt.Sprintf("%s:%d", d.Source, d.Line) }

// Load reads every path in order: a directory contributes its files (in
// lexical order, recursively, kustomization files left out), a file its
// documents. stdin serves "-".
// Empty documents (only comments or whitespace) are dropped. An unreadable
// path is an error; a document that does not parse is returned with Err set,
// so that the caller reports it where it stands.
func Load(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		if p == Stdin {
			raw, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading standard input: %w", err)
			}
			docs = append(docs, Split(Stdin, raw)...)
			continue
		}
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, Split(f, raw)...)
		}
	}
	return docs, nil
}

// expand turns a path into the files it names.
func expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && slices.Contains(Extensions, strings.ToLower(filepath.Ext(path))) && !slices.Contains(kustomizeFiles, d.Name()) {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// Split cuts one file's content into its documents.
func Split(source string, raw []byte) []Document {
	var docs []Document
	var cur bytes.Buffer
	start, line := 1, 0
	flush := func() {
		if d, ok := parse(source, start, cur.Bytes()); ok {
			docs = append(docs, expandList(d)...)
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), len(raw)+1)
	for sc.Scan() {
		line++
		text := sc.Text()
		if isSeparator(text) {
			flush()
			start = line + 1
			continue
		}
		cur.WriteString(text)
		cur.WriteByte('\n')
	}
	flush()
	return docs
}

// isSeparator reports whether a line ends one YAML document and starts the next.
func isSeparator(line string) bool {
	line = strings.TrimRight(line, " \t\r")
	return line == "---" || strings.HasPrefix(line, "--- ")
}

// parse converts one document to JSON; ok is false for an empty document.
func parse(source string, line int, raw []byte) (Document, bool) {
	d := Document{Source: source, Line: line}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		d.Err = fmt.Errorf("not YAML: %w", err)
		return d, true
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return d, false
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		d.Err = fmt.Errorf("not an object: %w", err)
		return d, true
	}
	d.APIVersion, d.Kind, d.JSON = meta.APIVersion, meta.Kind, js
	d.Namespace, d.Name = meta.Metadata.Namespace, meta.Metadata.Name
	if d.APIVersion == "" || d.Kind == "" {
		d.Err = fmt.Errorf("apiVersion and kind are required")
	}
	return d, true
}

// expandList turns a v1 List (what `kubectl get -o yaml` prints) into its
// items, in order, each placed at the List's line.
func expandList(d Document) []Document {
	if d.Err != nil || d.APIVersion != "v1" || d.Kind != "List" {
		return []Document{d}
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(d.JSON, &list); err != nil {
		d.Err = fmt.Errorf("v1 List: %w", err)
		return []Document{d}
	}
	out := make([]Document, 0, len(list.Items))
	for _, item := range list.Items {
		if i, ok := parse(d.Source, d.Line, item); ok {
			out = append(out, i)
		}
	}
	return out
}
