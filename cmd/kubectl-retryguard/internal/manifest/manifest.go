// Package manifest reads Kubernetes manifests from files and directories the
// way `kubectl apply -f` does: directories are walked in lexical order, files
// hold one or more YAML (or JSON) documents separated by "---" lines (split by
// apimachinery's YAML reader, as kubectl splits them), and documents keep
// their order.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// Split cuts one file's content into its documents with apimachinery's YAML
// reader, the one `kubectl apply -f` reads files with: a line that starts
// with "---" ends a document, and anything after the dashes but blanks or a
// comment is an error. That error is the last document, at its line: kubectl
// reads no further.
func Split(source string, raw []byte) []Document {
	lines := bytes.Split(raw, []byte("\n"))
	next := 0 // index in lines of the first line not yet accounted for
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs []Document
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			for next < len(lines) && !badSeparator(lines[next]) {
				next++
			}
			return append(docs, Document{Source: source, Line: next + 1, Err: fmt.Errorf("not YAML: %w", err)})
		}
		// The reader leaves out the separators before the document and
		// returns every other line, each ended by one "\n".
		for next < len(lines) && bytes.HasPrefix(lines[next], separator) {
			next++
		}
		if d, ok := parse(source, next+1, doc); ok {
			docs = append(docs, expandList(d)...)
		}
		next += bytes.Count(doc, []byte("\n"))
	}
}

// separator starts every line that ends a document, for the YAML reader.
var separator = []byte("---")

// badSeparator reports whether the YAML reader refuses the line: dashes
// followed by more than blanks or a comment.
func badSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, separator)
	rest = bytes.TrimSpace(rest)
	return ok && len(rest) > 0 && rest[0] != '#'
}

// yamlLine matches the line numbers in the YAML library's errors: "yaml:
// line 3: ..." and, one a line, "  line 3: ...".
var yamlLine = regexp.MustCompile(`(?m)^(yaml: |\s+)line (\d+):`)

// inFile renumbers the lines of a document's YAML error from the file's
// line first, where the document starts, so the error points into the file.
func inFile(err error, first int) error {
	return errors.New(yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := yamlLine.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[2])
		return fmt.Sprintf("%sline %d:", sub[1], n+first-1)
	}))
}

// parse converts one document to JSON; ok is false for an empty document.
func parse(source string, line int, raw []byte) (Document, bool) {
	d := Document{Source: source, Line: line}
	// Strict: a duplicated field is refused, as with kubectl's default
	// --validate=strict, not silently replaced by the later one.
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		d.Err = fmt.Errorf("not YAML: %w", inFile(err, line))
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
