// Package cluster runs a real single-node Kubernetes cluster on this machine
// for the end-to-end suite: etcd, kube-apiserver (Node and RBAC
// authorization), kube-controller-manager, kube-scheduler, containerd, the
// kubelet, kube-proxy and a NetworkPolicy enforcer (kube-router's firewall),
// with PKI generated here and pods on a bridge that the cluster creates.
// Images come from tarballs imported into containerd or, when
// Options.RegistryBinary is set, from an OCI registry (CNCF Distribution) the
// cluster runs on the node's address, over HTTPS that containerd verifies.
//
// Everything it changes on the host — iptables rules, ipsets, sysctls, network
// namespaces, cgroups, mounts, the bridge — is recorded first and put back by
// Down. Only one cluster runs on a machine at a time (a lock enforces it).
// A Cluster is not safe for concurrent use, except Down, which may be called
// from a signal handler while Up is running.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The cluster's fixed layout. The addresses are private ranges on a bridge
// the cluster creates; nothing is routed off the machine.
const (
	// DefaultWorkDir holds the cluster's state; it is removed by Down.
	DefaultWorkDir = "/var/tmp/retryguard-e2e"
	// DefaultImageDir holds the image tarballs built for the cluster.
	DefaultImageDir = "/var/tmp/retryguard-e2e-images"
	// DefaultLogDir keeps every component's log after Down, for diagnosis.
	DefaultLogDir = "/var/tmp/retryguard-e2e-logs"
	// NodeName is the one node's name.
	NodeName = "retryguard-e2e"
	// BridgeName is the Linux bridge the pods attach to.
	BridgeName = "rge2e0"
	// NodeIP is the bridge's address: the node's InternalIP, where the API
	// server listens and where pods reach it through the kubernetes Service.
	NodeIP = "10.244.0.1"
	// PodCIDR is the pods' subnet on the bridge.
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR is the ClusterIP range.
	ServiceCIDR = "10.96.0.0/24"
	// kubernetesServiceIP is the first address of ServiceCIDR.
	kubernetesServiceIP = "10.96.0.1"
	// PauseImage is the sandbox image, built here from a static program.
	PauseImage = "retryguard.local/e2e/pause:1"
	// DefaultStartTimeout bounds Up.
	DefaultStartTimeout = 3 * time.Minute
	// stopGrace is how long each component has to exit on SIGTERM.
	stopGrace = 10 * time.Second
)

// Options configure Up. ControlPlaneAssets and NodeAssets are required.
type Options struct {
	// ControlPlaneAssets holds kube-apiserver and etcd (hack/envtest-assets.sh).
	ControlPlaneAssets string
	// NodeAssets holds kubelet, kube-proxy, kube-scheduler and
	// kube-controller-manager (hack/e2e/node-assets.sh).
	NodeAssets string
	// NetworkPolicyAssets holds kube-router (hack/e2e/netpol-assets.sh), run
	// with its firewall only, so that NetworkPolicies are enforced; empty
	// runs no enforcer, and a NetworkPolicy then changes nothing.
	NetworkPolicyAssets string
	// RegistryBinary is CNCF Distribution's registry (hack/gotool.sh
	// registry), run on NodeIP:RegistryPort with a serving certificate from
	// the cluster's CA, which containerd trusts for it; empty runs none.
	RegistryBinary string
	// PauseImageTarball is a docker-archive tarball of PauseImage.
	PauseImageTarball string
	// WorkDir and LogDir default to DefaultWorkDir and DefaultLogDir.
	WorkDir, LogDir string
	// StartTimeout defaults to DefaultStartTimeout.
	StartTimeout time.Duration
	// Logf reports progress; nil discards it.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	// Kubeconfig is the path of a cluster-admin kubeconfig.
	Kubeconfig string
	// Config is the same credentials for client-go.
	Config *rest.Config
	// ContainerdSocket is containerd's gRPC socket.
	ContainerdSocket string
	// Registry is the node's registry, host:port, and RegistryCA the PEM CA
	// its certificate chains to; both empty without Options.RegistryBinary.
	Registry, RegistryCA string

	opts  Options
	host  *hostState
	lock  *os.File
	mu    sync.Mutex
	procs []*process
	down  bool
}

// paths inside WorkDir.
func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.opts.WorkDir}, parts...)...)
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// Up brings a cluster up and returns once the node is Ready, kube-proxy has
// programmed the kubernetes Service, the NetworkPolicy enforcer (when
// Options.NetworkPolicyAssets is set) has installed its chains and the
// default ServiceAccount exists.
// On failure it tears down what it started before returning.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.ControlPlaneAssets == "" || opts.NodeAssets == "" {
		return nil, errors.New("cluster: ControlPlaneAssets and NodeAssets are required")
	}
	if opts.WorkDir == "" {
		opts.WorkDir = DefaultWorkDir
	}
	if opts.LogDir == "" {
		opts.LogDir = DefaultLogDir
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	c := &Cluster{opts: opts}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.up(ctx); err != nil {
		if derr := c.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("tearing down after the failure: %w", derr))
		}
		return nil, fmt.Errorf("cluster: %w (component logs in %s)", err, opts.LogDir)
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context) error {
	if err := checkKernel(); err != nil {
		return err
	}
	if err := ensurePackages(ctx, c.logf); err != nil {
		return err
	}
	lock, err := os.OpenFile(c.opts.WorkDir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("another e2e cluster is running on this machine (lock %s.lock)", c.opts.WorkDir)
	}
	c.mu.Lock()
	c.lock = lock
	c.mu.Unlock()
	if err := c.recoverPrevious(); err != nil {
		return err
	}
	for _, d := range []string{c.path("pki"), c.path("etcd"), c.path("containerd"), c.path("cni"), c.path("kubelet"), c.opts.LogDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	host, err := snapshotHost()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.host = host
	c.mu.Unlock()
	// Saved before anything changes, so that a run killed without teardown
	// is undone by the next one (recoverPrevious).
	if err := writeJSON(c.path("host-state.json"), host); err != nil {
		return err
	}
	if err := c.network(ctx); err != nil {
		return err
	}
	if err := c.pki(); err != nil {
		return err
	}
	if err := c.writeConfigs(); err != nil {
		return err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return err
	}
	if err := c.startNode(ctx); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// recoverPrevious undoes a run that ended without Down (killed, or the
// machine rebooted mid-run): its processes, host changes and state.
func (c *Cluster) recoverPrevious() error {
	data, err := os.ReadFile(c.path("host-state.json"))
	if errors.Is(err, os.ErrNotExist) {
		if err := unmountUnder(c.opts.WorkDir); err != nil {
			return err
		}
		return os.RemoveAll(c.opts.WorkDir)
	}
	if err != nil {
		return err
	}
	c.logf("undoing a previous run that did not tear down (%s)", c.opts.WorkDir)
	var prev hostState
	if err := json.Unmarshal(data, &prev); err != nil {
		return fmt.Errorf("reading the previous run's state: %w", err)
	}
	_ = killStrays(c.opts.WorkDir, c.logf)
	time.Sleep(500 * time.Millisecond)
	errs := []error{prev.restore(c.logf)}
	if linkExists(BridgeName) {
		errs = append(errs, run(context.Background(), "ip", "link", "delete", BridgeName))
	}
	errs = append(errs, unmountUnder(c.opts.WorkDir), os.RemoveAll(c.opts.WorkDir))
	return errors.Join(errs...)
}

// network creates the bridge with the node's address and turns on
// forwarding and bridge netfilter (kube-proxy's DNAT must see pod-to-pod
// replies).
func (c *Cluster) network(ctx context.Context) error {
	if linkExists(BridgeName) {
		return fmt.Errorf("interface %s already exists; remove it or stop whatever owns it", BridgeName)
	}
	for _, args := range [][]string{
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
		// ClusterIPs route to the bridge, so that a packet kube-proxy has
		// not (yet) translated stays on this machine instead of taking the
		// default route. The route goes with the bridge.
		{"route", "add", ServiceCIDR, "dev", BridgeName, "src", NodeIP},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{
		"net/ipv4/ip_forward":                 "1",
		"net/bridge/bridge-nf-call-iptables":  "1",
		"net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := setSysctl(k, v); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", k, v, err)
		}
	}
	return nil
}

func (c *Cluster) pki() error {
	dir := c.path("pki")
	ca, err := newAuthority(dir)
	if err != nil {
		return err
	}
	nodeIP := net.ParseIP(NodeIP)
	specs := []certSpec{
		{file: "apiserver", cn: "kube-apiserver", server: true,
			ips: []net.IP{nodeIP, net.ParseIP(kubernetesServiceIP), net.ParseIP("127.0.0.1")},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{file: "admin", cn: "retryguard-e2e-admin", orgs: []string{"system:masters"}},
		{file: "controller-manager", cn: "system:kube-controller-manager"},
		{file: "scheduler", cn: "system:kube-scheduler"},
		{file: "kube-proxy", cn: "system:kube-proxy"},
		{file: "kube-router", cn: kubeRouterUser},
		{file: "kubelet-client", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}},
		{file: "kubelet-serving", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}, server: true,
			ips: []net.IP{nodeIP}, dns: []string{NodeName}},
		{file: "registry", cn: registryAddr, server: true, ips: []net.IP{nodeIP}},
	}
	for _, s := range specs {
		if err := ca.issue(s); err != nil {
			return err
		}
	}
	return serviceAccountKey(dir)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	return c.startEnv(name, bin, nil, args...)
}

// startEnv starts a component with env added to its environment.
func (c *Cluster) startEnv(name, bin string, env []string, args ...string) (*process, error) {
	p, err := startProcess(c.opts.LogDir, name, bin, env, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		_ = p.stop(stopGrace)
		return nil, errors.New("cluster is being torn down")
	}
	c.procs = append(c.procs, p)
	c.logf("started %s (pid %d)", name, p.cmd.Process.Pid)
	return p, nil
}

// poll calls f every interval until it returns true or an error, ctx ends,
// or one of the components exits.
func (c *Cluster) poll(ctx context.Context, what string, interval time.Duration, f func(context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := f(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		c.mu.Lock()
		procs := append([]*process(nil), c.procs...)
		c.mu.Unlock()
		for _, p := range procs {
			if done, perr := p.exited(); done {
				return fmt.Errorf("waiting for %s: %s exited (%v); see %s", what, p.name, perr, filepath.Join(c.opts.LogDir, p.name+".log"))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	etcdPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	apiPort, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	if _, err := c.start("etcd", filepath.Join(c.opts.ControlPlaneAssets, "etcd"),
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", peerPort),
		"--unsafe-no-fsync", "--quota-backend-bytes=2147483648"); err != nil {
		return err
	}
	pki := func(f string) string { return c.path("pki", f) }
	if _, err := c.start("kube-apiserver", filepath.Join(c.opts.ControlPlaneAssets, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address="+NodeIP, fmt.Sprintf("--secure-port=%d", apiPort), "--advertise-address="+NodeIP,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--client-ca-file="+pki("ca.crt"),
		"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki("sa.pub"),
		"--service-account-signing-key-file="+pki("sa.key"),
		"--profiling=false"); err != nil {
		return err
	}
	server := fmt.Sprintf("https://%s:%d", NodeIP, apiPort)
	for _, k := range []struct{ file, cert string }{
		{"admin", "admin"}, {"controller-manager", "controller-manager"}, {"scheduler", "scheduler"},
		{"kube-proxy", "kube-proxy"}, {"kube-router", "kube-router"}, {"kubelet", "kubelet-client"},
	} {
		if err := writeKubeconfig(c.path(k.file+".kubeconfig"), server, pki("ca.crt"), pki(k.cert+".crt"), pki(k.cert+".key")); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.path("admin.kubeconfig")
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := c.poll(ctx, "kube-apiserver /readyz", 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		var code int
		err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error()
		return err == nil && code == http.StatusOK, err
	}); err != nil {
		return err
	}
	c.logf("kube-apiserver ready at %s", server)
	if _, err := c.start("kube-controller-manager", filepath.Join(c.opts.NodeAssets, "kube-controller-manager"),
		"--kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+pki("sa.key"),
		"--root-ca-file="+pki("ca.crt"),
		"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
		"--controllers=*"); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", filepath.Join(c.opts.NodeAssets, "kube-scheduler"),
		"--kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authentication-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authorization-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"); err != nil {
		return err
	}
	return nil
}

func writeKubeconfig(path, server, ca, cert, key string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) startNode(ctx context.Context) error {
	if c.opts.RegistryBinary != "" {
		if err := c.startRegistry(ctx); err != nil {
			return err
		}
	}
	c.ContainerdSocket = c.path("containerd", "containerd.sock")
	if _, err := c.start("containerd", "/usr/bin/containerd", "--config="+c.path("containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.poll(ctx, "containerd's socket", 100*time.Millisecond, func(context.Context) (bool, error) {
		_, err := os.Stat(c.ContainerdSocket)
		return err == nil, err
	}); err != nil {
		return err
	}
	if c.opts.PauseImageTarball != "" {
		if err := c.ImportImage(ctx, c.opts.PauseImageTarball); err != nil {
			return err
		}
	}
	if _, err := c.start("kubelet", filepath.Join(c.opts.NodeAssets, "kubelet"),
		"--config="+c.path("kubelet", "config.yaml"),
		"--kubeconfig="+c.path("kubelet.kubeconfig"),
		"--root-dir="+c.path("kubelet"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP,
		"--v=1"); err != nil {
		return err
	}
	_, err := c.start("kube-proxy", filepath.Join(c.opts.NodeAssets, "kube-proxy"),
		"--config="+c.path("kube-proxy.yaml"), "--v=1")
	return err
}

// ImportImage loads a docker-archive or OCI tarball into containerd's k8s.io
// namespace, where the kubelet finds it (pods use imagePullPolicy Never or
// IfNotPresent).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return run(ctx, "ctr", "--address", c.ContainerdSocket, "-n", "k8s.io", "images", "import", "--no-unpack=false", tarball)
}

func (c *Cluster) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := c.poll(ctx, "the node to be Ready", 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("node Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// kube-proxy's first sync runs before the enforcer starts: the
	// enforcer's first iptables-restore of the filter table, at the same
	// moment, removed the KUBE-SERVICES chain kube-proxy was jumping to
	// ("Chain 'KUBE-SERVICES' does not exist"), and kube-proxy then waited
	// its 30 s retry period, or longer, with the Service unprogrammed.
	if err := c.poll(ctx, "kube-proxy to program the kubernetes Service", 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, "iptables", "-t", "nat", "-S", "KUBE-SERVICES").Output()
		return err == nil && strings.Contains(string(out), kubernetesServiceIP), err
	}); err != nil {
		return err
	}
	// The enforcer reads its Node object at start and exits without one.
	if err := c.startNetworkPolicy(ctx); err != nil {
		return err
	}
	if err := c.waitNetworkPolicy(ctx); err != nil {
		return err
	}
	return c.poll(ctx, "the default ServiceAccount", 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// Down stops every component by PID in reverse order, removes the pods'
// sandboxes (and with them their network namespaces and veths), and puts the
// host back as it was: iptables rules, sysctls, network namespaces, cgroups,
// mounts and the bridge. It is idempotent and bounded in time.
func (c *Cluster) Down() error {
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return nil
	}
	c.down = true
	procs := c.procs
	host, lock := c.host, c.lock
	c.mu.Unlock()
	if lock == nil {
		return nil // never got the lock: nothing of ours to undo
	}
	defer lock.Close()
	var errs []error
	byName := map[string]*process{}
	for _, p := range procs {
		byName[p.name] = p
	}
	stopNamed := func(names ...string) {
		for _, n := range names {
			if p := byName[n]; p != nil {
				errs = append(errs, p.stop(stopGrace))
			}
		}
	}
	// The kubelet first, so that it does not restart what is removed next.
	stopNamed("kubelet", "kube-proxy", "kube-router", "kube-scheduler", "kube-controller-manager", "registry")
	if p := byName["containerd"]; p != nil {
		if done, _ := p.exited(); !done {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			errs = append(errs, removeSandboxes(ctx, c.ContainerdSocket, c.logf))
			cancel()
		}
	}
	stopNamed("containerd", "kube-apiserver", "etcd")
	errs = append(errs, killStrays(c.opts.WorkDir, c.logf))
	if host != nil {
		errs = append(errs, host.restore(c.logf))
	}
	if linkExists(BridgeName) {
		errs = append(errs, run(context.Background(), "ip", "link", "delete", BridgeName))
	}
	if err := unmountUnder(c.opts.WorkDir); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, os.RemoveAll(c.opts.WorkDir))
	}
	return errors.Join(errs...)
}
