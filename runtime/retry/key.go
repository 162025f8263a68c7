package retry

import (
	"fmt"
	"strings"
)

// Vars are the caller's values for a policy's key template, such as
// {"user_id": "42", "login_session_id": "s-9"}.
type Vars map[string]string

// keyTemplate is a compiled idempotency key template: literal text and
// {placeholder} names, alternating.
type keyTemplate struct {
	parts []keyPart
	size  int
}

type keyPart struct {
	literal string
	name    string // a placeholder when not empty
}

// compileKey parses a template the CRD already validated; it still refuses
// unpaired braces rather than guessing.
func compileKey(tmpl string) (*keyTemplate, error) {
	k := &keyTemplate{}
	for rest := tmpl; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, fmt.Errorf("key template %q: unpaired }", tmpl)
			}
			k.parts = append(k.parts, keyPart{literal: rest})
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 || strings.IndexByte(rest[:open], '}') >= 0 {
			return nil, fmt.Errorf("key template %q: unpaired braces", tmpl)
		}
		if open > 0 {
			k.parts = append(k.parts, keyPart{literal: rest[:open]})
		}
		k.parts = append(k.parts, keyPart{name: rest[open+1 : open+end]})
		rest = rest[open+end+1:]
	}
	for _, p := range k.parts {
		k.size += len(p.literal) + 16
	}
	return k, nil
}

// render fills the template once per logical operation: every attempt of
// the operation carries the result unchanged.
func (k *keyTemplate) render(vars Vars) (string, error) {
	var b strings.Builder
	b.Grow(k.size)
	for _, p := range k.parts {
		if p.name == "" {
			b.WriteString(p.literal)
			continue
		}
		v, ok := vars[p.name]
		if !ok || v == "" {
			return "", fmt.Errorf("key variable %q is missing", p.name)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}
