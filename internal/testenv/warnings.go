package testenv

import (
	"context"
	"sync"
)

// WarningRecorder keeps the admission warnings the API server relays; set it
// as a rest.Config's WarningHandlerWithContext. It is safe for concurrent use.
type WarningRecorder struct {
	mu  sync.Mutex
	got []string
}

// HandleWarningHeaderWithContext records one warning.
func (w *WarningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, msg)
}

// Take returns and clears the warnings seen so far.
func (w *WarningRecorder) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}
