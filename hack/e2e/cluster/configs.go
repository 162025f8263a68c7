package cluster

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
)

// writeConfigs writes containerd's, the CNI's, the kubelet's and
// kube-proxy's configuration. Three settings are needed on cgroup v1
// machines without CAP_SYS_RESOURCE, and each is marked where it is set.
func (c *Cluster) writeConfigs() error {
	files := map[string]string{
		c.path("containerd", "config.toml"): fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # Root here lacks CAP_SYS_RESOURCE; without this runc fails with
  # "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  # Each registry's hosts.toml is here (the node's registry's trusts the
  # cluster's CA); a registry without one is reached as containerd's default.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`, c.path("containerd", "root"), c.path("containerd", "state"), c.path("containerd", "containerd.sock"),
			PauseImage, CNIBinDir, c.path("cni"), c.path("containerd", "certs.d")),

		// The firewall plugin opens the FORWARD chain for the pods' traffic,
		// which the host's policy would otherwise drop.
		c.path("cni", "10-retryguard-e2e.conflist"): fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "retryguard-e2e",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q, "rangeStart": "10.244.0.10", "rangeEnd": "10.244.0.250"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
`, BridgeName, PodCIDR, NodeIP, c.path("cni", "ipam")),

		c.path("kubelet", "config.yaml"): fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The machine has cgroup v1, which kubelet 1.37 refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
port: 10250
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %[3]s
tlsPrivateKeyFile: %[4]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]s}
authorization:
  mode: Webhook
clusterDomain: cluster.local
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
resolvConf: /etc/resolv.conf
registerNode: true
`, c.path("containerd", "containerd.sock"), NodeIP, c.path("pki", "kubelet-serving.crt"),
			c.path("pki", "kubelet-serving.key"), c.path("pki", "ca.crt")),

		c.path("kube-proxy.yaml"): fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
mode: iptables
clusterCIDR: %[4]s
healthzBindAddress: ""
metricsBindAddress: ""
nodePortAddresses: [%[3]s/32]
iptables:
  localhostNodePorts: false
# Leave the host's conntrack limits alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.path("kube-proxy.kubeconfig"), NodeName, NodeIP, PodCIDR),
	}
	if c.opts.RegistryBinary != "" {
		maps.Copy(files, c.registryConfigs())
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}
