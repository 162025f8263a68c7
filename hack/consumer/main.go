// Command consumer is the smallest application that uses Retryguard the way
// an application team does: the file watcher over a mounted ConfigMap, an
// Executor, and an http.Client whose transport enforces the policy. It is
// built in make test so that the runtime module's footprint on an
// application (its module graph, its binary) is checked, not assumed.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

func main() {
	policies := watch.NewFiles("/etc/retryguard/policies")
	if err := policies.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := &http.Client{Transport: &retry.RoundTripper{
		Executor: retry.New(policies),
		Policy:   "sms-2fa-dispatch",
	}}
	resp, err := client.Post("https://telephony.example/v1/messages", "application/json", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp.Body.Close()
}
