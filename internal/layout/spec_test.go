package layout

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// specFile is the one home of the project's requirements and their IDs.
const specFile = "docs/spec.md"

var (
	// specID matches every form of requirement ID the repository cites.
	specID = regexp.MustCompile(`\b(RG-[A-Z]+(?:-[0-9]+)?|INV-RTY-[0-9]{2}|MC-[A-Z]{2}-[0-9]{2}|ADV-[A-Z]{2}-[0-9]{2}|` +
		`RETRY-SMS-[0-9]{3}|INC-[0-9]{4}|ALERT_[A-Z_]+)\b`)
	// specDefinition is how docs/spec.md defines an ID: a heading that
	// starts with it, or a bold term that does.
	specDefinition = regexp.MustCompile(`(?m)^(?:#+ |- \*\*|.*\*\*)(` + specID.String()[2:len(specID.String())-2] + `)\b`)
	// designCitation is a citation of a design document outside the
	// repository, which no reader can look up.
	designCitation = regexp.MustCompile(`(?i)\bseeds? 0[0-9]{2}\b|\bthe seeds?\b`)
	// randomSeed tells a line about a random source's seed apart from a citation.
	randomSeed = regexp.MustCompile(`(?i)rand|pcg|fuzz|corpus|seeded|math/rand`)
)

// citingFiles are the files whose text may cite a requirement, relative to
// the checkout's root.
func citingFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".sh", ".tpl", ".txt":
			if !strings.HasPrefix(filepath.Base(path), "zz_generated") {
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				files = append(files, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every requirement a file cites is defined in docs/spec.md, and no file
// cites a design document the repository does not hold.
func TestEveryCitedRequirementIsInTheSpec(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, specFile))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range specDefinition.FindAllStringSubmatch(string(raw), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 20 {
		t.Fatalf("%s defines %d IDs: its definitions are no longer read", specFile, len(defined))
	}
	cited := map[string]bool{}
	for _, path := range citingFiles(t) {
		f, err := os.Open(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			for _, id := range specID.FindAllString(line, -1) {
				cited[id] = cited[id] || path != filepath.FromSlash(specFile)
				if !defined[id] {
					t.Errorf("%s:%d cites %s, which %s does not define", path, n, id, specFile)
				}
			}
			if m := designCitation.FindString(line); m != "" && !randomSeed.MatchString(line) {
				t.Errorf("%s:%d cites %q, a document outside the repository: cite an ID of %s", path, n, m, specFile)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	for _, id := range []string{"INV-RTY-04", "RETRY-SMS-001", "RG-LOAD"} {
		if !cited[id] {
			t.Errorf("nothing cites %s: the scan no longer reads the tree", id)
		}
	}
	var unused []string
	for id := range defined {
		if !cited[id] {
			unused = append(unused, id)
		}
	}
	slices.Sort(unused)
	t.Logf("defined in %s and not cited elsewhere: %v", specFile, unused)
}
