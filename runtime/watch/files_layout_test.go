package watch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

// kubeletVolume writes a directory the way kubelet's atomic writer does: the
// files go into a timestamped directory, ..data points at it, and each
// top-level path is a symlink through ..data. A new version swaps ..data
// with one rename.
type kubeletVolume struct {
	t       *testing.T
	dir     string
	version int
}

func (v *kubeletVolume) must(err error) {
	v.t.Helper()
	if err != nil {
		v.t.Fatal(err)
	}
}

// write publishes files (path → content) as the volume's new content.
func (v *kubeletVolume) write(files map[string][]byte) {
	v.t.Helper()
	v.version++
	ts := filepath.Join(v.dir, "..2026_11_29_21_00_0"+string(rune('0'+v.version))+".000000001")
	top := map[string]bool{}
	for path, data := range files {
		v.must(os.MkdirAll(filepath.Dir(filepath.Join(ts, path)), 0o755))
		v.must(os.WriteFile(filepath.Join(ts, path), data, 0o644))
		top[splitFirst(path)] = true
	}
	v.must(os.Symlink(filepath.Base(ts), filepath.Join(v.dir, "..data_tmp")))
	v.must(os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")))
	entries, err := os.ReadDir(v.dir)
	v.must(err)
	for _, e := range entries { // drop top-level links of paths that left
		if name := e.Name(); name[0] != '.' && !top[name] {
			v.must(os.Remove(filepath.Join(v.dir, name)))
		}
	}
	for name := range top {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); err != nil {
			v.must(os.Symlink(filepath.Join("..data", name), link))
		}
	}
}

func splitFirst(path string) string {
	for i := range len(path) {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return path
}

func payload(name, namespace string, gen int64) []byte {
	p := fixtures.Named(name, gen)
	p.Policy.Namespace = namespace
	return raw(p)
}

func newQuietFiles(dir, namespace string) *Files {
	f := NewFiles(dir)
	f.Namespace = namespace
	f.Logger = slog.New(slog.DiscardHandler)
	f.PollInterval = time.Hour
	return f
}

// One ConfigMap mounted as a volume: the key is policy.json, so the policy
// must be named from the payload, not "policy".
func TestFilesNamesAPolicyFromItsPayload(t *testing.T) {
	v := &kubeletVolume{t: t, dir: t.TempDir()}
	v.write(map[string][]byte{policyconfig.DataKey: payload("sms-2fa-dispatch", "auth", 1)})
	f := newQuietFiles(v.dir, "auth")
	v.must(f.rescan())
	if p, ok := f.Policy("sms-2fa-dispatch"); !ok || p.Policy.Generation != 1 {
		t.Fatalf("the policy is not served under its name: %v %v", p, ok)
	}
	if _, ok := f.Policy("policy"); ok {
		t.Fatal("a policy is served under the file's name")
	}
}

// Several ConfigMaps projected side by side into one volume, each key
// policy.json mapped to <policy>/policy.json, updated and shrunk the way
// kubelet does it.
func TestFilesReadsAProjectedVolumeOfSeveralConfigMaps(t *testing.T) {
	v := &kubeletVolume{t: t, dir: t.TempDir()}
	v.write(map[string][]byte{
		"sms-2fa-dispatch/policy.json":          payload("sms-2fa-dispatch", "auth", 1),
		"marketing-campaign-notify/policy.json": payload("marketing-campaign-notify", "auth", 1),
	})
	f := newQuietFiles(v.dir, "auth")
	changed := make(chan string, 16)
	f.OnChange(func(n string) { changed <- n })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.must(f.Start(ctx))
	for _, n := range []string{"sms-2fa-dispatch", "marketing-campaign-notify"} {
		if p, ok := f.Policy(n); !ok || p.Policy.Generation != 1 {
			t.Fatalf("%s: %v %v", n, p, ok)
		}
	}

	// One ConfigMap changes, one turns corrupt: the corrupt one keeps its last good policy.
	v.write(map[string][]byte{
		"sms-2fa-dispatch/policy.json":          payload("sms-2fa-dispatch", "auth", 2),
		"marketing-campaign-notify/policy.json": []byte(`{"schemaVersion":"corrupt"}`),
	})
	// A rescan that began before the swap may read one file through the old
	// ..data and the next through the new, so the test waits for both to be
	// read (the rescan the swap's own event starts), not for the first.
	waitUntil(t, changed, func() bool {
		p, _ := f.Policy("sms-2fa-dispatch")
		return p.Policy.Generation == 2 && f.Rejected() > 0
	})
	if p, ok := f.Policy("marketing-campaign-notify"); !ok || p.Policy.Generation != 1 || f.Rejected() != 1 {
		t.Fatalf("a corrupt payload did not keep the last good policy: %v %v, rejected %d", p, ok, f.Rejected())
	}

	// One ConfigMap leaves the projection: only its policy goes.
	v.write(map[string][]byte{"sms-2fa-dispatch/policy.json": payload("sms-2fa-dispatch", "auth", 2)})
	waitUntil(t, changed, func() bool { _, ok := f.Policy("marketing-campaign-notify"); return !ok })
	if _, ok := f.Policy("sms-2fa-dispatch"); !ok {
		t.Fatal("the remaining policy went too")
	}
}

// A payload of another namespace is refused where the pod's namespace is
// known; so is a second file that claims a policy another file supplies.
func TestFilesRefusesAnotherNamespaceAndAClaimOnAnotherFilesPolicy(t *testing.T) {
	v := &kubeletVolume{t: t, dir: t.TempDir()}
	v.write(map[string][]byte{
		"a/policy.json": payload("sms-2fa-dispatch", "auth", 1),
		"b/policy.json": payload("payments", "payments", 1),
		"c/policy.json": payload("sms-2fa-dispatch", "auth", 7),
	})
	f := newQuietFiles(v.dir, "auth")
	v.must(f.rescan())
	if _, ok := f.Policy("payments"); ok {
		t.Fatal("a payload of namespace payments is served in auth")
	}
	if p, _ := f.Policy("sms-2fa-dispatch"); p == nil || p.Policy.Generation != 1 {
		t.Fatalf("the second claim replaced the first: %v", p)
	}
	if f.Ignored() != 2 {
		t.Fatalf("ignored %d, want 2", f.Ignored())
	}
	// Removing the claimant removes nothing it did not supply.
	v.write(map[string][]byte{"a/policy.json": payload("sms-2fa-dispatch", "auth", 1)})
	v.must(f.rescan())
	if _, ok := f.Policy("sms-2fa-dispatch"); !ok {
		t.Fatal("removing a refused claim removed the policy")
	}
}

// A pod that knows no namespace (no POD_NAMESPACE, no service account
// mount) cannot tell another namespace's payload from its own, so it serves
// nothing, logs why and counts every payload it ignored.
func TestFilesWithoutANamespaceServesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.json"), payload("payments", "payments", 1), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "")
	f := NewFiles(dir)
	if f.Namespace != "" {
		t.Skipf("this machine mounts a service account (namespace %q)", f.Namespace)
	}
	var logs strings.Builder
	f.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	f.PollInterval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Policy("payments"); ok {
		t.Fatal("a payload is served by a pod whose namespace is unknown")
	}
	if f.Ignored() != 1 || !strings.Contains(logs.String(), "POD_NAMESPACE") {
		t.Fatalf("ignored %d; logs %s", f.Ignored(), logs.String())
	}
}

// A symlink that leads outside the watched directory is not followed, be
// it a file or a subdirectory, relative or absolute; kubelet's own ..data
// links, which stay inside, are (the layout tests above).
func TestFilesFollowsNoSymlinkOutsideTheDirectory(t *testing.T) {
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"x.json", "sub/policy.json"} {
		if err := os.WriteFile(filepath.Join(outside, file), payload("payments", "auth", 1), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v := &kubeletVolume{t: t, dir: t.TempDir()}
	v.write(map[string][]byte{policyconfig.DataKey: payload("sms-2fa-dispatch", "auth", 1)})
	rel, err := filepath.Rel(v.dir, outside)
	v.must(err)
	v.must(os.Symlink(filepath.Join(rel, "sub"), filepath.Join(v.dir, "evil-dir")))
	v.must(os.Symlink(filepath.Join(outside, "sub"), filepath.Join(v.dir, "evil-abs")))
	v.must(os.Symlink(filepath.Join(rel, "x.json"), filepath.Join(v.dir, "evil.json")))
	f := newQuietFiles(v.dir, "auth")
	v.must(f.rescan())
	if _, ok := f.Policy("payments"); ok {
		t.Fatal("a payload outside the watched directory is served")
	}
	if _, ok := f.Policy("sms-2fa-dispatch"); !ok {
		t.Fatal("the kubelet layout's payload is not served")
	}
	v.must(f.rescan()) // counted once, not once per rescan
	if f.Ignored() != 3 {
		t.Fatalf("ignored %d, want the 3 symlinks", f.Ignored())
	}
}

// A file over the ConfigMap size limit is refused without being read whole,
// and the policy it last supplied stays; back under the limit it is read
// again.
func TestFilesRefusesAFileOverTheConfigMapLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sms.json")
	if err := os.WriteFile(path, payload("sms", "auth", 1), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newQuietFiles(dir, "auth")
	if err := f.rescan(); err != nil {
		t.Fatal(err)
	}
	// 64 MiB, sparse: the test writes no such amount, and a watcher that
	// reads it whole shows in the heap.
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	_ = fh.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := f.rescan(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 2*limits.MaxConfigMapBytes {
		t.Fatalf("a rescan of a 64 MiB file allocated %d bytes", grown)
	}
	if p, ok := f.Policy("sms"); !ok || p.Policy.Generation != 1 || f.Rejected() != 1 {
		t.Fatalf("after an oversized file: %v %v, rejected %d", p, ok, f.Rejected())
	}
	if err := os.WriteFile(path, payload("sms", "auth", 2), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.rescan(); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.Policy("sms"); p.Policy.Generation != 2 || f.Rejected() != 1 {
		t.Fatalf("back under the limit: %v, rejected %d", p, f.Rejected())
	}
}

func waitUntil(t *testing.T, changed <-chan string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond) // a refusal is not a change: nothing is sent for it
	defer tick.Stop()
	for !cond() {
		select {
		case <-changed:
		case <-tick.C:
		case <-timeout:
			t.Fatal("the change went unnoticed for 10s")
		}
	}
}

// ConfigMap volumes mounted side by side under one directory, each with its
// own ..data: a swap inside one is noticed through fsnotify, not the poll.
func TestFilesNoticesASwapInsideAMountedSubdirectory(t *testing.T) {
	root := t.TempDir()
	vols := map[string]*kubeletVolume{}
	for _, n := range []string{"sms-2fa-dispatch", "marketing-campaign-notify"} {
		dir := filepath.Join(root, n)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		vols[n] = &kubeletVolume{t: t, dir: dir}
		vols[n].write(map[string][]byte{policyconfig.DataKey: payload(n, "auth", 1)})
	}
	f := newQuietFiles(root, "auth")
	changed := make(chan string, 16)
	f.OnChange(func(n string) { changed <- n })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for n := range vols {
		if _, ok := f.Policy(n); !ok {
			t.Fatalf("%s not served", n)
		}
	}
	vols["marketing-campaign-notify"].write(map[string][]byte{policyconfig.DataKey: payload("marketing-campaign-notify", "auth", 2)})
	waitUntil(t, changed, func() bool { p, _ := f.Policy("marketing-campaign-notify"); return p.Policy.Generation == 2 })
}
