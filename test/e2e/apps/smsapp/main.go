// Command smsapp is the demo application of the end-to-end suite: a 2FA SMS
// sender that imports runtime/ and sends every message to the vendor through
// retry.RoundTripper under one policy: $POLICY, sms-2fa-dispatch unless set.
// It learns the policy either from the ConfigMap informer (WATCH=informer,
// needing only the documented app Role) or from the ConfigMap mounted as a
// volume (WATCH=files, POLICY_DIR).
//
//	POST /send?user=U&session=S  sends one SMS; JSON {status, code, attempts}
//	GET  /policy                 JSON {found, maxAttempts, generation, budget}
//	GET  /healthz                200 once the policy is known
//
// /policy's budget is the policy's RetryBudget as this pod divides it:
// the consumer count its payload carries and D, the number of pods the
// budget's absolute figures are divided over right now (0: no share yet).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
	"github.com/retryguard/retryguard/test/e2e/internal/policyview"
)

// defaultPolicy is the policy this application runs under unless $POLICY
// names another.
const defaultPolicy = "sms-2fa-dispatch"

// source is what the application needs from a watcher.
type source interface {
	retry.Source
	Start(context.Context) error
}

// Result is /send's answer.
type Result struct {
	Status   int    `json:"status,omitempty"`
	Code     string `json:"code,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
	// Last is the evidence of the last attempt of a failed operation.
	Last *retry.Evidence `json:"last,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	policy := os.Getenv("POLICY")
	if policy == "" {
		policy = defaultPolicy
	}
	var src source
	switch mode := os.Getenv("WATCH"); mode {
	case "informer":
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		src = informer.New(cs, os.Getenv("POD_NAMESPACE"))
	case "files":
		src = watch.NewFiles(os.Getenv("POLICY_DIR"))
	default:
		return fmt.Errorf("WATCH=%q: want informer or files", mode)
	}
	if err := src.Start(ctx); err != nil {
		return err
	}
	vendorURL := strings.TrimSuffix(os.Getenv("VENDOR_URL"), "/")
	// The executor's budget registry knows this pod by $POD_UID (the
	// downward API's metadata.uid), which a count must name to give it a share.
	ex := retry.New(src)
	pools := &retry.Pools{}
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: policy, Pools: pools}}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := src.Policy(policy); !ok {
			http.Error(w, "policy "+policy+" not published yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /policy", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(policyview.Of(src, ex, policy))
	})
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ctx := retry.WithVars(r.Context(), retry.Vars{"user_id": q.Get("user"), "login_session_id": q.Get("session")})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, vendorURL+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var res Result
		resp, err := client.Do(req)
		var re *retry.Error
		switch {
		case errors.As(err, &re):
			res = Result{Code: string(re.Code), Attempts: re.Attempts, Error: re.Detail, Last: &re.Last}
		case err != nil:
			res = Result{Error: err.Error()}
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			res = Result{Status: resp.StatusCode}
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	slog.Info("smsapp listening", "policy", policy, "watch", os.Getenv("WATCH"), "vendor", vendorURL)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
