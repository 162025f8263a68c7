package retry

import (
	"fmt"
	"strings"

	"github.com/retryguard/retryguard/contract/limits"
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
// unpaired braces and placeholders that are not names rather than guess,
// and the executor then makes one attempt (never zero) under the policy.
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
		name := rest[open+1 : open+end]
		if !isName(name) {
			return nil, fmt.Errorf("key template %q: placeholder {%s} is not a name (letters, digits, _)", tmpl, name)
		}
		k.parts = append(k.parts, keyPart{name: name})
		rest = rest[open+end+1:]
	}
	shortest := 0 // every placeholder renders at least one byte
	for _, p := range k.parts {
		shortest += max(len(p.literal), 1)
	}
	if shortest > limits.MaxIdempotencyKeyLength {
		return nil, fmt.Errorf("key template %q: its shortest key is %d bytes, longer than %d: it can never render", tmpl, shortest, limits.MaxIdempotencyKeyLength)
	}
	for _, p := range k.parts {
		for i := range len(p.literal) {
			if c := p.literal[i]; c < 0x20 || c > 0x7e {
				return nil, fmt.Errorf("key template %q: byte %#x at %d: a key is printable ASCII", tmpl, c, i)
			}
		}
		k.size += len(p.literal) + 16
	}
	return k, nil
}

func isName(s string) bool {
	for _, r := range s {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return s != ""
}

// errMissingVar and errBadKey tell Do which code a rendering failure takes.
type (
	errMissingVar struct{ name string }
	errBadKey     struct{ reason string }
)

func (e *errMissingVar) Error() string { return fmt.Sprintf("key variable %q is missing", e.name) }
func (e *errBadKey) Error() string     { return e.reason }

// render fills the template once per logical operation: every attempt of
// the operation carries the result unchanged. The result is at most
// limits.MaxIdempotencyKeyLength bytes of printable ASCII, so that it is a valid header value
// that cannot smuggle another header in.
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
			return "", &errMissingVar{name: p.name}
		}
		if b.Len()+len(v) > limits.MaxIdempotencyKeyLength {
			return "", &errBadKey{reason: fmt.Sprintf("the rendered key is longer than %d bytes (variable %q is %d bytes)",
				limits.MaxIdempotencyKeyLength, p.name, len(v))}
		}
		for i := range len(v) {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return "", &errBadKey{reason: fmt.Sprintf("key variable %q holds byte %#x at %d: a key is printable ASCII", p.name, c, i)}
			}
		}
		b.WriteString(v)
	}
	if b.Len() > limits.MaxIdempotencyKeyLength {
		return "", &errBadKey{reason: fmt.Sprintf("the rendered key is %d bytes, longer than %d", b.Len(), limits.MaxIdempotencyKeyLength)}
	}
	return b.String(), nil
}
