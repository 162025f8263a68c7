package limits

// The enum names a policy is written with, shared by the CRD (api/v1alpha1
// types its constants from these), the payload parser (contract/policyconfig)
// and the runtime (runtime/retry); the jitters' are contract/backoff's Jitter.
// A test holds the CRD's enum markers to these sets.

// Transport failures, as retryOn.errors names them.
const (
	// ConnectionRefused: the connection was refused, so no request was sent.
	ConnectionRefused = "ConnectionRefused"
	// ConnectionReset: the connection dropped; the request may have been applied.
	ConnectionReset = "ConnectionReset"
	// Timeout: no answer in time; the request may have been applied.
	Timeout = "Timeout"
	// DNSFailure: the name did not resolve, so no request was sent.
	DNSFailure = "DNSFailure"
)

// TransportErrors are the transport failures a policy may list.
var TransportErrors = []string{ConnectionRefused, ConnectionReset, Timeout, DNSFailure}

// Failures of the TLS handshake: evidence names, never a retryOn value. A
// retry cannot fix a certificate or a server that does not speak TLS, so the
// runtime ends on them at once; nothing of the request was sent.
const (
	// TLSCertificate: a certificate did not verify (the server's, or ours at the server).
	TLSCertificate = "TLSCertificate"
	// TLSHandshake: the handshake failed otherwise (no TLS at the other end, no common protocol).
	TLSHandshake = "TLSHandshake"
)

// PreDispatchErrors are the transport failures that prove the request never
// left the process: retrying them needs no replay safety. The CRD's
// maxAttempts rule spells this set out; a test holds it to this one.
var PreDispatchErrors = []string{ConnectionRefused, DNSFailure}

// Criticalities separate callers whose failure domains must not be shared.
const (
	CriticalityCritical = "Critical"
	CriticalityStandard = "Standard"
)

// Criticalities are the criticalities a policy may declare.
var Criticalities = []string{CriticalityCritical, CriticalityStandard}
