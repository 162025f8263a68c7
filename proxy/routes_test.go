package proxy

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/codes"
)

func TestParseAcceptsTheDocumentedTable(t *testing.T) {
	tbl, err := Parse([]byte(`{"routes": [
		{"port": 15001, "pathPrefix": "/v1/", "policy": "sms-2fa-dispatch", "upstream": "https://api.telephony.example/base/"},
		{"port": 15001, "pathPrefix": "/v1/status", "policy": "sms-status-probe", "upstream": "https://api.telephony.example"},
		{"port": 15002, "policy": "marketing-campaign-notify", "upstream": "http://10.96.0.12:8080"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.Routes[2].PathPrefix; got != "/" {
		t.Fatalf("the default prefix is %q, want /", got)
	}
	if got := tbl.Ports(); len(got) != 2 || got[0] != 15001 || got[1] != 15002 {
		t.Fatalf("ports %v", got)
	}
}

// Every refusal names the field, the rule and the code.
func TestParseRefusesWithTheFieldAndTheCode(t *testing.T) {
	route := func(fields string) string { return `{"routes":[{` + fields + `}]}` }
	ok := `"port":15001,"policy":"p","upstream":"https://h"`
	for _, tc := range []struct {
		name, table, field string
		code               codes.Code
	}{
		{"not JSON", `{`, "routes", codes.InvalidRoute},
		{"unknown field", route(ok + `,"retries":3`), "routes", codes.InvalidRoute},
		{"trailing data", route(ok) + `{}`, "routes", codes.InvalidRoute},
		{"no route", `{"routes":[]}`, "routes", codes.InvalidRoute},
		{"too many", `{"routes":[` + strings.TrimSuffix(strings.Repeat(`{`+ok+`},`, MaxRoutes+1), ",") + `]}`, "routes", codes.OutOfRange},
		{"privileged port", route(`"port":80,"policy":"p","upstream":"https://h"`), "routes[0].port", codes.OutOfRange},
		{"port too high", route(`"port":70000,"policy":"p","upstream":"https://h"`), "routes[0].port", codes.OutOfRange},
		{"the admin port", route(`"port":15020,"policy":"p","upstream":"https://h"`), "routes[0].port", codes.InvalidRoute},
		{"the metrics port", route(`"port":15090,"policy":"p","upstream":"https://h"`), "routes[0].port", codes.InvalidRoute},
		{"relative prefix", route(ok + `,"pathPrefix":"v1"`), "routes[0].pathPrefix", codes.InvalidRoute},
		{"dot segment", route(ok + `,"pathPrefix":"/v1/../admin"`), "routes[0].pathPrefix", codes.InvalidRoute},
		{"empty segment", route(ok + `,"pathPrefix":"//v1"`), "routes[0].pathPrefix", codes.InvalidRoute},
		{"escape", route(ok + `,"pathPrefix":"/v%2F1"`), "routes[0].pathPrefix", codes.InvalidRoute},
		{"long prefix", route(ok + `,"pathPrefix":"/` + strings.Repeat("a", MaxPathPrefix) + `"`), "routes[0].pathPrefix", codes.OutOfRange},
		{"no policy", route(`"port":15001,"upstream":"https://h"`), "routes[0].policy", codes.InvalidRoute},
		{"bad policy", route(`"port":15001,"policy":"Not_A_Name","upstream":"https://h"`), "routes[0].policy", codes.InvalidRoute},
		{"no upstream", route(`"port":15001,"policy":"p"`), "routes[0].upstream", codes.InvalidRoute},
		{"ftp upstream", route(`"port":15001,"policy":"p","upstream":"ftp://h"`), "routes[0].upstream", codes.InvalidRoute},
		{"no host", route(`"port":15001,"policy":"p","upstream":"https:///v1"`), "routes[0].upstream", codes.InvalidRoute},
		{"credentials", route(`"port":15001,"policy":"p","upstream":"https://u:pw@h"`), "routes[0].upstream", codes.InvalidRoute},
		{"query", route(`"port":15001,"policy":"p","upstream":"https://h/?a=1"`), "routes[0].upstream", codes.InvalidRoute},
		{"twice", `{"routes":[{` + ok + `},{` + ok + `,"pathPrefix":"/"}]}`, "routes[1].pathPrefix", codes.InvalidRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.table))
			var re *RouteError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRoutes) {
				t.Fatalf("Parse: %v, want a *RouteError", err)
			}
			if re.Field != tc.field || re.Code != tc.code || !strings.HasPrefix(err.Error(), tc.field+": "+string(tc.code)+": ") {
				t.Fatalf("Parse: %q (field %s, code %s), want field %s and code %s", err, re.Field, re.Code, tc.field, tc.code)
			}
		})
	}
}

// FuzzParse: any input is a table or a *RouteError, never a panic, and an
// accepted table validates again and builds a proxy.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"routes":[{"port":15001,"pathPrefix":"/v1/","policy":"sms-2fa-dispatch","upstream":"https://api.example/b/"}]}`))
	f.Add([]byte(`{"routes":[{"port":15001,"policy":"p","upstream":"http://[::1]:8080"}]}`))
	f.Add([]byte(`{"routes":[{"port":1024,"pathPrefix":"/a/b","policy":"a.b","upstream":"https://h%41"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tbl, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRoutes) {
				t.Fatalf("Parse: %v is not a route error", err)
			}
			return
		}
		if err := tbl.Validate(DefaultAdminPort); err != nil {
			t.Fatalf("an accepted table does not validate: %v", err)
		}
		if _, err := (&Runtime{}).New(tbl, 0); err != nil {
			t.Fatalf("an accepted table builds no proxy: %v", err)
		}
	})
}

// The sidecar's binary links the runtime and client-go, never the
// operator's packages: app pods' sidecars do not carry controller-runtime,
// the API types or the controllers.
func TestTheProxyLinksNoOperatorPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/retryguard/retryguard/cmd/retryguard-proxy").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list listed %d packages: %s", len(deps), out)
	}
	for _, d := range deps {
		for _, banned := range []string{"sigs.k8s.io/controller-runtime", "github.com/retryguard/retryguard/api",
			"github.com/retryguard/retryguard/controllers", "github.com/retryguard/retryguard/webhooks", "k8s.io/apiextensions-apiserver"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("retryguard-proxy links %s", d)
			}
		}
	}
}
