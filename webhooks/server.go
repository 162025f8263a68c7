package webhooks

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ServerOptions are the admission webhook server's options. With
// clientCAName set (a file in certDir) the server completes a TLS handshake
// only with a caller that presents a certificate that CA signed: the API
// server's webhook client certificate, where the cluster gives it one
// (docs/security.md, who may reach the webhook). Anyone else who can reach
// the pod gets no answer, so reviews cost an attacker, not the webhook.
func ServerOptions(port int, certDir, clientCAName string, tlsOpts []func(*tls.Config)) webhook.Options {
	return webhook.Options{Port: port, CertDir: certDir, ClientCAName: clientCAName, TLSOpts: tlsOpts}
}
