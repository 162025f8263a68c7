package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// RegistryPort is where the node's registry listens, on NodeIP: the bridge
// is the cluster's own, so the port is always free there.
const RegistryPort = 5000

// registryAddr is the registry's host:port, as image references name it.
var registryAddr = net.JoinHostPort(NodeIP, strconv.Itoa(RegistryPort))

// registryConfigs are the registry's configuration (HTTPS with a
// certificate from the cluster's CA, storage in the work directory, so that
// Down removes it) and containerd's hosts.toml for it, which trusts that CA:
// the kubelet pulls from the registry as from any other, over verified TLS.
// They map each file's path to its content.
func (c *Cluster) registryConfigs() map[string]string {
	return map[string]string{
		c.path("registry", "config.yml"): fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog: {disabled: false}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
  tls:
    certificate: %q
    key: %q
`, c.path("registry", "data"), registryAddr, c.path("pki", "registry.crt"), c.path("pki", "registry.key")),
		c.path("containerd", "certs.d", registryAddr, "hosts.toml"): fmt.Sprintf(`server = "https://%[1]s"

[host."https://%[1]s"]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
`, registryAddr, c.path("pki", "ca.crt")),
	}
}

// startRegistry runs CNCF Distribution and waits until it answers the
// registry API's version check over HTTPS, trusting the cluster's CA alone.
func (c *Cluster) startRegistry(ctx context.Context) error {
	// Distribution exports traces over OTLP unless told not to, and no
	// collector listens here.
	if _, err := c.startEnv("registry", c.opts.RegistryBinary, []string{"OTEL_TRACES_EXPORTER=none"},
		"serve", c.path("registry", "config.yml")); err != nil {
		return err
	}
	ca, err := os.ReadFile(c.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	if err := c.poll(ctx, "the registry at "+registryAddr, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+registryAddr+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("GET /v2/: %s", resp.Status)
	}); err != nil {
		return err
	}
	c.Registry, c.RegistryCA = registryAddr, c.path("pki", "ca.crt")
	c.logf("registry ready at https://%s", registryAddr)
	return nil
}
