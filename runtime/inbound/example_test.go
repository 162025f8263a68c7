package inbound_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/retryguard/retryguard/runtime/inbound"
)

func ExampleGuard_Middleware() {
	guard := &inbound.Guard{} // 3 requests per key per 10 s
	send := guard.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 4 {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		r.Header.Set("Idempotency-Key", "SMS-2FA-42-s-9")
		w := httptest.NewRecorder()
		send.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
			continue
		}
		fmt.Println(w.Code)
	}
	// Output:
	// 201
	// 201
	// 201
	// 429 Retry-After: 30 application/problem+json
}
