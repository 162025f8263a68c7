package webhooks

import (
	"context"
	"net/http"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// maxDeniedCodes bounds the code label: refusal messages quote the values
// a user sent, so a forged "ERR_..." could otherwise mint a series per
// request. Codes beyond it are counted as "other".
const maxDeniedCodes = 64

// admissionDenied counts refusals by the ERR_... code each carries; a
// refusal with several codes counts once under each, one without any under
// "none".
var admissionDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "retryguard_admission_denied_total",
	Help: "RetryPolicy and RetryBudget admissions the webhooks refused, by ERR_ code.",
}, []string{"code"})

func init() { metrics.Registry.MustRegister(admissionDenied) }

// CountDenials wraps srv so that every admission webhook registered on it
// counts its refusals in retryguard_admission_denied_total. The manager
// passes its webhook server through it; the wrapper is as safe for
// concurrent use as srv.
func CountDenials(srv webhook.Server) webhook.Server { return &countingServer{Server: srv} }

type countingServer struct{ webhook.Server }

func (s *countingServer) Register(path string, hook http.Handler) {
	if wh, ok := hook.(*admission.Webhook); ok {
		wh.Handler = countingHandler{wh.Handler}
	}
	s.Server.Register(path, hook)
}

type countingHandler struct{ admission.Handler }

func (h countingHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	res := h.Handler.Handle(ctx, req)
	if !res.Allowed {
		countDenial(res)
	}
	return res
}

// codePattern finds a code where Code.Message puts it, at the start of a
// message or of a field error's detail ("CODE: text"), not inside the
// quoted value a field error echoes.
var codePattern = regexp.MustCompile(`(?:^|: )(ERR_[A-Z][A-Z_]*): `)

var seenCodes = struct {
	sync.Mutex
	codes map[string]bool
}{codes: map[string]bool{}}

func countDenial(res admission.Response) {
	var texts []string
	if r := res.Result; r != nil {
		texts = append(texts, r.Message)
		if r.Details != nil {
			for _, c := range r.Details.Causes {
				texts = append(texts, c.Message)
			}
		}
	}
	found := map[string]bool{}
	for _, text := range texts {
		for _, m := range codePattern.FindAllStringSubmatch(text, -1) {
			found[boundedCode(m[1])] = true
		}
	}
	if len(found) == 0 {
		found["none"] = true
	}
	for code := range found {
		admissionDenied.WithLabelValues(code).Inc()
	}
}

func boundedCode(code string) string {
	seenCodes.Lock()
	defer seenCodes.Unlock()
	if !seenCodes.codes[code] {
		if len(seenCodes.codes) >= maxDeniedCodes {
			return "other"
		}
		seenCodes.codes[code] = true
	}
	return code
}
