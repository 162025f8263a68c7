package watch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

func raw(p *policyconfig.Payload) []byte {
	b, err := policyconfig.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

func TestManualKeepsTheLastGoodPolicy(t *testing.T) {
	m := NewManual()
	if _, ok := m.Policy("sms"); ok {
		t.Fatal("an unknown policy")
	}
	if err := m.SetRaw("sms", raw(fixtures.Named("sms", 1))); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRaw("sms", []byte(`{"schemaVersion":"policy.retryguard.io/payload/v9"}`)); err == nil {
		t.Fatal("a corrupt update must be reported")
	}
	p, ok := m.Policy("sms")
	if !ok || p.Policy.Generation != 1 || m.Rejected() != 1 {
		t.Fatalf("after a corrupt update: %v %v, rejected %d", p, ok, m.Rejected())
	}
	m.Delete("sms")
	if _, ok := m.Policy("sms"); ok {
		t.Fatal("deleted")
	}
}

func TestFilesRescan(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("sms.json", raw(fixtures.Named("sms", 1)))
	write("README", []byte("not a policy"))
	t.Setenv("POD_NAMESPACE", "auth")
	f := NewFiles(dir)
	f.Logger = slog.New(slog.DiscardHandler)
	if err := f.rescan(); err != nil {
		t.Fatal(err)
	}
	if p, ok := f.Policy("sms"); !ok || p.Policy.Generation != 1 {
		t.Fatalf("%v %v", p, ok)
	}
	write("sms.json", []byte("{"))
	_ = f.rescan()
	if p, _ := f.Policy("sms"); p.Policy.Generation != 1 || f.Rejected() != 1 {
		t.Fatal("a corrupt file must keep the last good policy")
	}
	write("sms.json", raw(fixtures.Named("sms", 2)))
	_ = os.Remove(filepath.Join(dir, "README"))
	_ = f.rescan()
	if p, _ := f.Policy("sms"); p.Policy.Generation != 2 {
		t.Fatal("a good update applies")
	}
	_ = os.Remove(filepath.Join(dir, "sms.json"))
	_ = f.rescan()
	if _, ok := f.Policy("sms"); ok {
		t.Fatal("a removed file removes its policy")
	}
}

// Start reacts to a change on disk through fsnotify (or, failing that, the
// poll); the test waits on the change hook, not on a sleep.
func TestFilesNotices(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("POD_NAMESPACE", "auth")
	f := NewFiles(dir)
	f.PollInterval = time.Hour // only fsnotify can deliver within the test's bound
	changed := make(chan string, 4)
	f.OnChange(func(name string) { changed <- name })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sms.json"), raw(fixtures.Named("sms", 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-changed:
		if p, _ := f.Policy(name); name != "sms" || p.Policy.Generation != 3 {
			t.Fatalf("%s %v", name, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change noticed in 10s")
	}
}

func TestStatic(t *testing.T) {
	s := NewStatic(fixtures.Named("a", 1), fixtures.Named("b", 1))
	for _, n := range []string{"a", "b"} {
		if _, ok := s.Policy(n); !ok {
			t.Errorf("%s missing", n)
		}
	}
}

func TestCollectorCountsRejections(t *testing.T) {
	m := NewManual()
	_ = m.SetRaw("sms", []byte("{"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(m))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "retryguard_policy_payloads_rejected_total" && f.GetMetric()[0].GetCounter().GetValue() == 1 {
			return
		}
	}
	t.Fatalf("no rejection counted: %v", families)
}

// A mounted ConfigMap is updated the way kubelet's atomic writer does it:
// the files are symlinks into ..data, which is itself a symlink swapped by a
// rename. The watcher must see the new content through the unchanged links.
func TestFilesFollowsAnAtomicConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, gen int64) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "sms.json"), raw(fixtures.Named("sms", gen)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_09_15_v1", 1)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..2026_09_15_v1", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/sms.json", filepath.Join(dir, "sms.json")))

	f := newQuietFiles(dir, "auth")
	changed := make(chan string, 4)
	f.OnChange(func(name string) { changed <- name })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	must(f.Start(ctx))
	if p, ok := f.Policy("sms"); !ok || p.Policy.Generation != 1 {
		t.Fatalf("initial load: %v %v", p, ok)
	}
	version("..2026_09_15_v2", 2)
	must(os.Symlink("..2026_09_15_v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	timeout := time.After(10 * time.Second)
	for {
		if p, _ := f.Policy("sms"); p.Policy.Generation == 2 {
			return
		}
		select {
		case <-changed: // the initial load, then the swap
		case <-timeout:
			t.Fatal("the swap went unnoticed for 10s")
		}
	}
}
