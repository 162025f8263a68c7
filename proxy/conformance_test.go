package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The conformance vectors (conformance/README.md) that apply to the proxy,
// run through it: payloads through its config loading (the file watcher it
// runs with --watch=files, which the informer shares Parse with), keys through
// its Retryguard-Var-* headers, and Decide rows driven through a real
// upstream. The conformance module is not the root module's dependency (it
// is never published), so the files are read where they lie, with the few
// shapes this runner needs.

// vectorFile reads conformance/vectors/name strictly: a misspelt key fails.
func vectorFile(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "conformance", "vectors", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// loads reports whether the proxy's config loading serves payload: written
// as a mounted ConfigMap's policy.json, read by watch.Files for the pod's
// namespace.
func loads(t *testing.T, payload []byte, namespace, name string) bool {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, policyconfig.DataKey), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	f := watch.NewFiles(dir)
	f.Namespace = namespace
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, ok := f.Policy(name)
	return ok
}

// A refused payload is never enforced: the proxy makes exactly one attempt.
func TestConformancePayloadVectors(t *testing.T) {
	var file struct {
		Comment string          `json:"$comment"`
		Base    json.RawMessage `json:"base"`
		Vectors []struct {
			Name   string                     `json:"name"`
			Accept bool                       `json:"accept"`
			Field  string                     `json:"field,omitempty"`
			Set    map[string]json.RawMessage `json:"set,omitempty"`
			Delete []string                   `json:"delete,omitempty"`
			Raw    string                     `json:"raw,omitempty"`
		} `json:"vectors"`
	}
	vectorFile(t, "payload.json", &file)
	var admission []struct {
		Name    string          `json:"name"`
		Accept  bool            `json:"accept"`
		Payload json.RawMessage `json:"payload"`
	}
	vectorFile(t, "payload-admission.json", &admission)
	type vector struct {
		name    string
		accept  bool
		payload []byte
	}
	var all []vector
	for _, v := range file.Vectors {
		payload := []byte(v.Raw)
		if v.Raw == "" {
			var err error
			if payload, err = patch(file.Base, v.Set, v.Delete); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
		all = append(all, vector{"payload: " + v.Name, v.Accept, payload})
	}
	for _, v := range admission {
		all = append(all, vector{"admission: " + v.Name, v.Accept, v.Payload})
	}
	if len(all) < 50 {
		t.Fatalf("%d payload vectors", len(all))
	}
	u := newUpstream(t)
	for _, v := range all {
		t.Run(v.name, func(t *testing.T) {
			if got := loads(t, v.payload, "auth", "sms-2fa-dispatch"); got != v.accept {
				t.Fatalf("the proxy's config loading served it: %v, want %v", got, v.accept)
			}
			if v.accept {
				return
			}
			// Refused: under the route's policy name the proxy knows nothing,
			// and a 503 storm gets one attempt.
			before := len(u.requests())
			u.mu.Lock()
			u.script = []http.HandlerFunc{status(503), status(503)}
			u.mu.Unlock()
			h := newHarness(t, u, smsPayload(), Route{Port: 15001, PathPrefix: "/", Policy: "refused-" + strconv.Itoa(before), Upstream: u.URL})
			res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
			if p := problemOf(t, res, body); p.Code != string(codes.PolicyNotEnforced) || len(u.requests()) != before+1 {
				t.Fatalf("%+v after %d attempts, want one attempt, ERR_POLICY_NOT_ENFORCED", p, len(u.requests())-before)
			}
		})
	}
}

// patch applies a payload vector's set and delete (dot-separated paths) to base.
func patch(base json.RawMessage, set map[string]json.RawMessage, del []string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, err
	}
	at := func(path string) (map[string]any, string, error) {
		keys, obj := strings.Split(path, "."), doc
		for _, k := range keys[:len(keys)-1] {
			next, ok := obj[k].(map[string]any)
			if !ok {
				return nil, "", fmt.Errorf("%s: %q is not an object", path, k)
			}
			obj = next
		}
		return obj, keys[len(keys)-1], nil
	}
	for path, raw := range set {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		obj, key, err := at(path)
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
	for _, path := range del {
		obj, key, err := at(path)
		if err != nil {
			return nil, err
		}
		delete(obj, key)
	}
	return json.Marshal(doc)
}

// keyVectorApplies says whether HTTP headers can carry the vector to the
// proxy: each value a header field value without surrounding blanks (which
// HTTP strips), and no placeholder met only by a variable that differs from
// it in case or "_" (headers are case-insensitive: docs/proxy.md).
func keyVectorApplies(template string, vars map[string]string) string {
	for name, v := range vars {
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) || strings.TrimSpace(v) != v {
			return fmt.Sprintf("%s=%q cannot travel in a header", name, v)
		}
	}
	for _, p := range httprules.KeyTemplatePlaceholders(template) {
		if _, exact := vars[p]; exact {
			continue
		}
		for name := range vars {
			if VarHeader(name) == VarHeader(p) {
				return fmt.Sprintf("{%s} and %s read the same header", p, name)
			}
		}
	}
	return ""
}

func TestConformanceKeyVectors(t *testing.T) {
	var file struct {
		Comment string `json:"$comment"`
		Vectors []struct {
			Name     string            `json:"name"`
			Template string            `json:"template"`
			Vars     map[string]string `json:"vars"`
			Key      string            `json:"key,omitempty"`
			Code     string            `json:"code,omitempty"`
		} `json:"vectors"`
	}
	vectorFile(t, "keys.json", &file)
	applied := 0
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			if why := keyVectorApplies(v.Template, v.Vars); why != "" {
				t.Skip("not for a proxy: " + why)
			}
			applied++
			u := newUpstream(t)
			h := newHarness(t, u, smsPayload(func(p *policyconfig.Payload) { p.Policy.KeyTemplate = v.Template }))
			header := map[string]string{}
			for name, val := range v.Vars {
				header[VarHeader(name)] = val
			}
			res, body := h.send(t, http.MethodPost, "/v1/messages", header, `{}`)
			got := u.requests()
			if v.Code != "" {
				if p := problemOf(t, res, body); p.Code != v.Code || len(got) != 0 {
					t.Fatalf("%+v after %d attempts, want %s before any attempt", p, len(got), v.Code)
				}
				return
			}
			if res.StatusCode != http.StatusCreated || len(got) != 1 || got[0].Key != v.Key {
				t.Fatalf("%d %s, attempts %+v; want one attempt with key %q", res.StatusCode, body, got, v.Key)
			}
		})
	}
	if applied < len(file.Vectors)/2 {
		t.Fatalf("only %d of %d key vectors apply to the proxy", applied, len(file.Vectors))
	}
}

// decideInput is the part of a Decide row a real upstream can produce.
type decideInput struct {
	Class                 string `json:"class"`
	Status                int    `json:"status"`
	Transport             string `json:"transport"`
	Dispatched            bool   `json:"dispatched"`
	RetryAfter            string `json:"retryAfter"`
	RetryAfterUnparseable bool   `json:"retryAfterUnparseable"`
	NotEnforced           bool   `json:"notEnforced"`
	ReplaySafe            bool   `json:"replaySafe"`
	MayHaveApplied        bool   `json:"mayHaveApplied"`
	Unrepeatable          bool   `json:"unrepeatable"`
	Attempt               int    `json:"attempt"`
	MaxAttempts           int    `json:"maxAttempts"`
	Remaining             string `json:"remaining"`
	Wait                  string `json:"wait"`
	PerAttemptTimeout     string `json:"perAttemptTimeout"`
	MinRemaining          string `json:"minRemaining"`
	RetryAfterMaxDelay    string `json:"retryAfterMaxDelay"`
	Budget                string `json:"budget"`
}

// Decide rows through a real upstream: the row's failure is what the
// upstream answers on each of its first Attempt attempts, and the proxy's
// answer says what Decide did: another attempt (BACKOFF_WAIT: the next one
// succeeds, 201), the dependency's own answer (a permanent failure the
// RoundTripper delivers), or a problem with the row's code and state. Rows
// that rest on a timing (a remaining deadline, a backoff draw), a budget's
// denial, an earlier applied attempt, a transport failure other than a drop
// after the request was read, or a Retry-After that is not whole seconds
// cannot be produced by an upstream on the real clock and are the runtime's
// own (conformance/runtime_test.go).
func TestConformanceDecideVectors(t *testing.T) {
	var file struct {
		Comment  string          `json:"$comment"`
		Defaults json.RawMessage `json:"defaults"`
		Vectors  []struct {
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
			Want  struct {
				Next        string `json:"next"`
				Code        string `json:"code,omitempty"`
				Sleep       string `json:"sleep,omitempty"`
				Eligible    bool   `json:"eligible"`
				BudgetAsked bool   `json:"budgetAsked"`
			} `json:"want"`
		} `json:"vectors"`
	}
	vectorFile(t, "decide.json", &file)
	var defaults decideInput
	if err := json.Unmarshal(file.Defaults, &defaults); err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			in := defaults
			dec := json.NewDecoder(bytes.NewReader(v.Input))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				t.Fatal(err)
			}
			fail, why := upstreamFailure(in, defaults)
			if why != "" {
				t.Skip("not for an upstream on the real clock: " + why)
			}
			applied++
			p := smsPayload(func(p *policyconfig.Payload) {
				pol := &p.Policy
				pol.MaxAttempts, pol.LeafAttempts = int32(in.MaxAttempts), int32(in.MaxAttempts)
				pol.RetryAfterMaxDelay = policyconfig.Duration(mustDuration(t, in.RetryAfterMaxDelay))
				pol.RetryOnStatus = []int32{429, 503}
				if in.Class == "transient" || in.Class == "ambiguous" {
					pol.RetryOnStatus = append(pol.RetryOnStatus, int32(in.Status))
				} else {
					pol.RetryOnStatus = slices.DeleteFunc(pol.RetryOnStatus, func(s int32) bool { return s == int32(in.Status) })
				}
				pol.RetryOnErrors = []string{"ConnectionRefused", "ConnectionReset", "Timeout"}
				if !in.ReplaySafe {
					pol.KeyTemplate = "" // a keyless POST is not replay-safe
				}
			})
			script := make([]http.HandlerFunc, in.Attempt)
			for i := range script {
				script[i] = fail
			}
			u := newUpstream(t, script...)
			h := newHarness(t, u, p)
			res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
			attempts := len(u.requests())
			switch {
			case v.Want.Next == string(retry.BackoffWait):
				if res.StatusCode != http.StatusCreated || attempts != in.Attempt+1 {
					t.Fatalf("%d %s after %d attempts, want the retry's 201 after %d", res.StatusCode, body, attempts, in.Attempt+1)
				}
			case v.Want.Next == string(retry.TerminalExhausted) && v.Want.Code == string(codes.PermanentFailure) && in.Status != 0:
				if res.StatusCode != in.Status || attempts != in.Attempt {
					t.Fatalf("%d %s after %d attempts, want the dependency's own %d after %d", res.StatusCode, body, attempts, in.Status, in.Attempt)
				}
			default:
				pr := problemOf(t, res, body)
				if pr.Code != v.Want.Code || string(pr.State) != v.Want.Next || attempts != in.Attempt {
					t.Fatalf("%+v after %d attempts, want %s %s after %d", pr, attempts, v.Want.Next, v.Want.Code, in.Attempt)
				}
			}
		})
	}
	if applied < 15 {
		t.Fatalf("only %d of %d Decide rows drive through an upstream", applied, len(file.Vectors))
	}
}

// upstreamFailure is the handler that produces the row's failure on every
// one of its attempts, or why none can.
func upstreamFailure(in, defaults decideInput) (http.HandlerFunc, string) {
	switch {
	case in.Remaining != defaults.Remaining || in.Wait != defaults.Wait || in.PerAttemptTimeout != defaults.PerAttemptTimeout ||
		in.MinRemaining != defaults.MinRemaining:
		return nil, "a timing"
	case in.Budget != "":
		return nil, "a budget's denial"
	case in.MayHaveApplied:
		return nil, "an earlier applied attempt at this attempt number"
	case in.NotEnforced, in.Unrepeatable:
		return nil, "a policy or body state, not an answer"
	case in.MaxAttempts != defaults.MaxAttempts:
		return nil, "another attempt limit"
	}
	var header []string
	switch {
	case in.RetryAfterUnparseable:
		header = []string{"Retry-After", "soon"}
	case in.RetryAfter != "":
		d, err := time.ParseDuration(in.RetryAfter)
		if err != nil || d%time.Second != 0 || d > 2*time.Second && d <= mustParse(in.RetryAfterMaxDelay) {
			return nil, "a Retry-After the test cannot wait for in whole seconds"
		}
		header = []string{"Retry-After", strconv.Itoa(int(d / time.Second))}
	}
	switch {
	case in.Status != 0 && in.Transport == "":
		return status(in.Status, header...), ""
	case in.Status == 0 && in.Transport == "ConnectionReset" && in.Dispatched && in.Class == "ambiguous":
		return drop, ""
	}
	return nil, "a transport failure an upstream cannot produce on demand"
}

func mustParse(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
