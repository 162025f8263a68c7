package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// debianPackages maps each command the node needs to the Debian package
// that provides it; missing ones are installed with apt-get.
var debianPackages = []struct{ path, pkg string }{
	{"/usr/bin/containerd", "containerd"},
	{"/usr/sbin/runc", "runc"},
	{"/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"/usr/sbin/iptables", "iptables"},
	{"/usr/sbin/conntrack", "conntrack"},
	{"/usr/sbin/ip", "iproute2"},
	{"/usr/sbin/nft", "nftables"},
	{"/usr/sbin/ipset", "ipset"}, // kube-router's firewall
}

// PackageLock is the lock every package operation of the suite holds
// (ensurePackages here, hack/e2e/busybox-asset.sh), so that no two run at
// once: apt refuses a second one, and a download before the first
// apt-get update finds no package on a new machine.
const PackageLock = "/run/lock/retryguard-apt.lock"

// lockPackages takes PackageLock; the returned function releases it.
func lockPackages() (func(), error) {
	f, err := os.OpenFile(PackageLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("package lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("package lock %s: %w", PackageLock, err)
	}
	return func() { _ = f.Close() }, nil
}

// CNIBinDir is where Debian's containernetworking-plugins puts the plugins.
const CNIBinDir = "/usr/lib/cni"

// ensurePackages installs the Debian packages whose commands are missing.
func ensurePackages(ctx context.Context, logf func(string, ...any)) error {
	var missing []string
	for _, p := range debianPackages {
		if _, err := os.Stat(p.path); err != nil {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("missing %v and apt-get is not available to install them", missing)
	}
	unlock, err := lockPackages()
	if err != nil {
		return err
	}
	defer unlock()
	logf("installing Debian packages %v", missing)
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	update := exec.CommandContext(ctx, "apt-get", "update", "-q")
	update.Env = env
	if out, err := update.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %v\n%s", err, out)
	}
	install := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)...)
	install.Env = env
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %v: %v\n%s", missing, err, out)
	}
	return nil
}

// checkKernel fails with a message naming what is missing, rather than
// letting a component fail obscurely later.
func checkKernel() error {
	var missing []string
	for _, f := range []struct{ path, what string }{
		{"/proc/sys/net/bridge/bridge-nf-call-iptables", "br_netfilter (bridged pod traffic through iptables)"},
		{"/proc/sys/net/ipv4/ip_forward", "IPv4 forwarding"},
		{"/sys/fs/cgroup", "cgroups"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			missing = append(missing, f.what)
		}
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		missing = append(missing, "overlay filesystem (containerd's snapshotter)")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node runs containers)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("this machine cannot run the e2e node; missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// sysctls are every kernel setting the node's components may change: ours
// (forwarding, bridge netfilter) and the kubelet's and kube-proxy's own.
// Each is recorded before the cluster starts and written back after.
var sysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/ipv4/conf/all/route_localnet",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
}

// hostState is what the cluster changes on the host, as it was before.
type hostState struct {
	Sysctls   map[string]string `json:"sysctls"`
	Iptables  map[string]string `json:"iptables"`  // "iptables"/"ip6tables" → *-save output
	NftTables []string          `json:"nftTables"` // "family name", when nft is installed
	IPSets    []string          `json:"ipsets"`    // set names; nil without ipset (or a state saved before ipsets were recorded)
	Netns     []string          `json:"netns"`
	Cgroups   []string          `json:"cgroups"`
	CreatedBr bool              `json:"createdBridge"`
}

func snapshotHost() (*hostState, error) {
	s := &hostState{Sysctls: map[string]string{}, Iptables: map[string]string{}}
	for _, k := range sysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(fam + "-save").Output()
		if err != nil {
			return nil, fmt.Errorf("%s-save: %w", fam, err)
		}
		s.Iptables[fam] = string(out)
	}
	s.NftTables = nftTables()
	s.IPSets = ipsets()
	s.Netns = listDir("/var/run/netns")
	s.Cgroups = kubepodsCgroups()
	return s, nil
}

func setSysctl(key, value string) error {
	return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
}

// restore writes back what snapshot recorded; it carries on past errors and
// returns them all.
func (s *hostState) restore(logf func(string, ...any)) error {
	var errs []error
	for _, fam := range []string{"iptables", "ip6tables"} {
		if err := restoreIptables(fam, s.Iptables[fam]); err != nil {
			errs = append(errs, err)
		}
	}
	// iptables-nft leaves the tables it created (empty) behind, and
	// kube-proxy may add an nftables table of its own: drop every table
	// that did not exist before.
	hadTable := map[string]bool{}
	for _, t := range s.NftTables {
		hadTable[t] = true
	}
	for _, t := range nftTables() {
		if !hadTable[t] {
			args := append([]string{"delete", "table"}, strings.Fields(t)...)
			if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", t, err, out))
			}
		}
	}
	// kube-router's sets, once the restored rules no longer reference them.
	if s.IPSets != nil {
		hadSet := map[string]bool{}
		for _, n := range s.IPSets {
			hadSet[n] = true
		}
		for _, n := range ipsets() {
			if !hadSet[n] {
				if out, err := exec.Command("ipset", "destroy", n).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("ipset destroy %s: %v: %s", n, err, out))
				}
			}
		}
	}
	keys := make([]string, 0, len(s.Sysctls))
	for k := range s.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil || strings.TrimSpace(string(b)) == s.Sysctls[k] {
			continue
		}
		logf("restoring sysctl %s=%s (was %s)", k, s.Sysctls[k], strings.TrimSpace(string(b)))
		if err := setSysctl(k, s.Sysctls[k]); err != nil {
			errs = append(errs, err)
		}
	}
	before := map[string]bool{}
	for _, n := range s.Netns {
		before[n] = true
	}
	for _, n := range listDir("/var/run/netns") {
		if !before[n] {
			logf("deleting network namespace %s", n)
			if out, err := exec.Command("ip", "netns", "delete", n).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns delete %s: %v: %s", n, err, out))
			}
		}
	}
	had := map[string]bool{}
	for _, c := range s.Cgroups {
		had[c] = true
	}
	for _, c := range kubepodsCgroups() {
		if !had[c] {
			removeCgroupTree(c)
		}
	}
	return errors.Join(errs...)
}

// restoreIptables puts each table back as it was. A table that existed is
// restored from its saved rules; one that did not is emptied of rules and
// chains, since everything in it was added by the cluster.
func restoreIptables(fam, saved string) error {
	tables := splitTables(saved)
	var errs []error
	for _, t := range []string{"filter", "nat", "mangle", "raw"} {
		if rules, ok := tables[t]; ok {
			cmd := exec.Command(fam+"-restore", "--table", t)
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s-restore %s: %v: %s", fam, t, err, out))
			}
			continue
		}
		// Absent before: flush and drop what was added, ignoring a table
		// that still does not exist.
		_ = exec.Command(fam, "-t", t, "-F").Run()
		_ = exec.Command(fam, "-t", t, "-X").Run()
	}
	return errors.Join(errs...)
}

// nftTables lists nftables tables as "family name"; nil without nft.
func nftTables() []string {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			tables = append(tables, t)
		}
	}
	return tables
}

// ipsets lists the host's ipsets by name; nil without ipset.
func ipsets() []string {
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return nil
	}
	names := []string{}
	for _, line := range strings.Split(string(out), "\n") {
		if n := strings.TrimSpace(line); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// splitTables splits iptables-save output into each table's restorable
// section, from its "*table" line to its COMMIT.
func splitTables(saved string) map[string]string {
	tables := map[string]string{}
	var cur string
	var b strings.Builder
	for _, line := range strings.SplitAfter(saved, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			cur = strings.TrimSpace(line[1:])
			b.Reset()
			b.WriteString(line)
		case cur != "":
			b.WriteString(line)
			if strings.TrimSpace(line) == "COMMIT" {
				tables[cur] = b.String()
				cur = ""
			}
		}
	}
	return tables
}

func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// kubepodsCgroups lists the top-level cgroups the kubelet creates (one per
// cgroup v1 hierarchy).
func kubepodsCgroups() []string {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	more, _ := filepath.Glob("/sys/fs/cgroup/kubepods*")
	return append(matches, more...)
}

// removeCgroupTree removes an emptied cgroup tree, deepest first.
func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = unix.Rmdir(dirs[i])
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// linkExists reports whether a network interface exists.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
