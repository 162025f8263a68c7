package watch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// DefaultPollInterval is how often Files rescans even when fsnotify is quiet
// (or unavailable), as controller-runtime's certwatcher does.
const DefaultPollInterval = 10 * time.Second

// Files watches a directory of payloads, such as a ConfigMap volume (the key
// policy.json) or a projected volume of several ConfigMaps side by side
// (each key mapped to <name>/policy.json or <name>.json). Every *.json file
// at the top or one directory down is a payload, and each policy is named
// from its payload's policy.name, never from the file. Kubernetes swaps
// such a volume's content through the ..data symlink, so any event triggers
// a rescan of the whole directory.
//
// It reads only what kubelet writes (docs/security.md, mounted ConfigMaps):
// every path is opened beneath Dir through an os.Root, so a symlink that
// leads outside Dir, or is absolute, is not followed (kubelet's ..data
// layout is relative links inside the volume); a file over
// limits.MaxConfigMapBytes is refused unread. A payload of another
// namespace than Namespace is ignored and counted, as is every payload
// while Namespace is unknown, and a second file that claims a policy
// another file supplies; a removed file removes only the policy it
// supplied. A refused or unparsable file keeps the policy it last supplied.
type Files struct {
	*store
	Dir string
	// Namespace is the pod's namespace; NewFiles sets it from PodNamespace.
	// While it is "" nothing is served: a pod that cannot tell its own
	// namespace cannot tell another namespace's payload from its own.
	Namespace    string
	PollInterval time.Duration
	Logger       *slog.Logger

	contents map[string][]byte // file (relative to Dir) → last bytes read
	refused  map[string]string // file → why it was last refused unread
	supplied map[string]string // file → the policy it supplies
	supplier map[string]string // policy → the file that supplies it
}

// NewFiles watches dir, serving payloads of the pod's namespace.
func NewFiles(dir string) *Files {
	return &Files{store: newStore(), Dir: dir, Namespace: PodNamespace(), PollInterval: DefaultPollInterval, Logger: slog.Default(),
		contents: map[string][]byte{}, refused: map[string]string{}, supplied: map[string]string{}, supplier: map[string]string{}}
}

// serviceAccountNamespace is where Kubernetes tells a pod its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace is the pod's namespace: $POD_NAMESPACE (set it from the
// downward API), else the mounted service account's namespace, else ""
// (unknown: Files then serves nothing).
func PodNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// Start loads the directory, then watches it until ctx ends.
func (f *Files) Start(ctx context.Context) error {
	if f.Namespace == "" {
		f.Logger.Error("serving no policies: the pod's namespace is unknown; set POD_NAMESPACE from the downward API "+
			"(fieldRef metadata.namespace) or mount the service account", "dir", f.Dir)
	}
	if err := f.rescan(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	var events chan fsnotify.Event
	if err == nil {
		if err := w.Add(f.Dir); err == nil {
			events = w.Events
			f.watchSubdirs(w)
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
			if events != nil {
				f.watchSubdirs(w)
			}
		}
	}()
	return nil
}

// watchSubdirs adds the directories one level down, so that a ConfigMap
// volume mounted at <Dir>/<name> (with its own ..data) is noticed at once
// too. Adding a watched directory again is harmless.
func (f *Files) watchSubdirs(w *fsnotify.Watcher) {
	entries, err := os.ReadDir(f.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		// Real directories only: a symlink into ..data changes with every
		// swap, which the watch on Dir already sees.
		if e.IsDir() && !strings.HasPrefix(e.Name(), "..") {
			_ = w.Add(filepath.Join(f.Dir, e.Name()))
		}
	}
}

// maxDepth is how far below Dir payload files are looked for: the top, and
// one directory down (<name>/policy.json of a projected volume).
const maxDepth = 2

// Why a file is refused unread.
const (
	refusedOutside = "a symlink that leads outside the watched directory"
	refusedSize    = "larger than a ConfigMap may be"
)

// payloadFiles lists the *.json files beneath root, relative to it, in
// order, following symlinks that stay beneath it and skipping kubelet's ".."
// entries. A symlink that leaves root is listed in outside.
func payloadFiles(root *os.Root) (files, outside []string, err error) {
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		d, err := root.Open(rel)
		if err != nil {
			return err
		}
		entries, err := d.ReadDir(-1)
		_ = d.Close()
		if err != nil {
			return err
		}
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			path := filepath.Join(rel, e.Name())
			st, err := root.Stat(path) // through the symlinks, beneath root only
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // removed between ReadDir and now
			case err != nil:
				if e.Type()&fs.ModeSymlink != 0 {
					outside = append(outside, path)
				}
			case st.IsDir() && depth < maxDepth:
				_ = walk(path, depth+1)
			case st.Mode().IsRegular() && strings.HasSuffix(e.Name(), ".json"):
				files = append(files, path)
			}
		}
		return nil
	}
	return files, outside, walk(".", 1)
}

// readPayload reads file beneath root, refusing one over
// limits.MaxConfigMapBytes without reading it whole.
func readPayload(root *os.Root, file string) (data []byte, refused string, err error) {
	fh, err := root.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Size() > limits.MaxConfigMapBytes {
		return nil, refusedSize, nil
	}
	data, err = io.ReadAll(io.LimitReader(fh, limits.MaxConfigMapBytes+1)) // the file may grow after Stat
	if err != nil {
		return nil, "", err
	}
	if len(data) > limits.MaxConfigMapBytes {
		return nil, refusedSize, nil
	}
	return data, "", nil
}

// rescan applies every changed file and forgets every removed one. It runs
// on one goroutine at a time (Start's).
func (f *Files) rescan() error {
	root, err := os.OpenRoot(f.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	files, outside, err := payloadFiles(root)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, file := range outside {
		present[file] = true
		f.refuse(file, refusedOutside)
	}
	for _, file := range files {
		data, refused, err := readPayload(root, file)
		if err != nil {
			continue // removed between the listing and now
		}
		present[file] = true
		if refused != "" {
			f.refuse(file, refused)
			continue
		}
		_, wasRefused := f.refused[file]
		delete(f.refused, file)
		if !wasRefused && bytes.Equal(f.contents[file], data) {
			continue
		}
		f.contents[file] = data
		f.load(file, data)
	}
	for file := range f.refused {
		if !present[file] {
			delete(f.refused, file)
		}
	}
	for file := range f.contents {
		if !present[file] {
			delete(f.contents, file)
			f.forget(file)
		}
	}
	return nil
}

// refuse counts and logs a file refused unread, once until its reason
// changes; the policy it last supplied stays, as for a payload that does
// not parse.
func (f *Files) refuse(file, reason string) {
	if f.refused[file] == reason {
		return
	}
	f.refused[file] = reason
	log := f.Logger.With("file", filepath.Join(f.Dir, file))
	if reason == refusedOutside {
		f.ignored.Add(1)
		log.Warn("policy file ignored: "+reason, "dir", f.Dir)
		return
	}
	f.rejected.Add(1)
	log.Error("policy file rejected unread; keeping the last good policy: "+reason, "limit_bytes", limits.MaxConfigMapBytes)
}

// load serves the payload of one changed file, or says why not and keeps
// the last good policy.
func (f *Files) load(file string, data []byte) {
	log := f.Logger.With("file", filepath.Join(f.Dir, file))
	p, err := policyconfig.Parse(data)
	if err != nil {
		f.rejected.Add(1)
		log.Error("policy payload rejected; keeping the last good one", "err", err)
		return
	}
	name := p.Policy.Name
	if f.Namespace == "" {
		f.ignored.Add(1)
		log.Warn("policy payload ignored: the pod's namespace is unknown (set POD_NAMESPACE)", "policy", name, "namespace", p.Policy.Namespace)
		return
	}
	if p.Policy.Namespace != f.Namespace {
		f.ignored.Add(1)
		log.Warn("policy payload ignored: another namespace's", "policy", name, "namespace", p.Policy.Namespace, "pod_namespace", f.Namespace)
		return
	}
	if other, ok := f.supplier[name]; ok && other != file {
		f.ignored.Add(1)
		log.Warn("policy payload ignored: another file supplies this policy", "policy", name, "supplier", other)
		return
	}
	if prev, ok := f.supplied[file]; ok && prev != name {
		f.forget(file) // the file now publishes another policy
	}
	f.supplied[file], f.supplier[name] = name, file
	f.set(name, p)
}

// forget removes the policy file supplied, and nothing else.
func (f *Files) forget(file string) {
	name, ok := f.supplied[file]
	if !ok {
		return
	}
	delete(f.supplied, file)
	delete(f.supplier, name)
	f.set(name, nil)
}
