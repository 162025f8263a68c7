package watch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultPollInterval is how often Files rescans even when fsnotify is quiet
// (or unavailable), as controller-runtime's certwatcher does.
const DefaultPollInterval = 10 * time.Second

// Files watches a directory of payloads named <policy>.json, such as a
// projected ConfigMap volume. Kubernetes swaps such a volume's content
// through a symlink, so any event triggers a rescan of the whole directory.
type Files struct {
	*store
	Dir          string
	PollInterval time.Duration
	Logger       *slog.Logger

	contents map[string][]byte
}

// NewFiles watches dir.
func NewFiles(dir string) *Files {
	return &Files{store: newStore(), Dir: dir, PollInterval: DefaultPollInterval, Logger: slog.Default(), contents: map[string][]byte{}}
}

// Start loads the directory, then watches it until ctx ends.
func (f *Files) Start(ctx context.Context) error {
	if err := f.rescan(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	var events chan fsnotify.Event
	if err == nil {
		if err := w.Add(f.Dir); err == nil {
			events = w.Events
		} else {
			f.Logger.Warn("fsnotify unavailable; polling only", "dir", f.Dir, "err", err)
		}
	} else {
		f.Logger.Warn("fsnotify unavailable; polling only", "err", err)
	}
	go func() {
		if w != nil {
			defer w.Close()
		}
		tick := time.NewTicker(max(f.PollInterval, 100*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-events:
			case <-tick.C:
			}
			if err := f.rescan(); err != nil {
				f.Logger.Error("rescanning policies", "dir", f.Dir, "err", err)
			}
		}
	}()
	return nil
}

// rescan applies every changed file and forgets every removed one. It runs
// on one goroutine at a time (Start's).
func (f *Files) rescan() error {
	entries, err := os.ReadDir(f.Dir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), "..") || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.Dir, e.Name()))
		if err != nil {
			continue // removed between ReadDir and now
		}
		present[name] = true
		if bytes.Equal(f.contents[name], data) {
			continue
		}
		f.contents[name] = data
		if err := f.apply(name, data); err != nil {
			f.Logger.Error("policy payload rejected; keeping the last good one", "policy", name, "err", err)
		}
	}
	for name := range f.contents {
		if !present[name] {
			delete(f.contents, name)
			f.set(name, nil)
		}
	}
	return nil
}
