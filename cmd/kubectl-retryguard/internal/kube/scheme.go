// Package kube holds what the plugin shares with a cluster: the scheme of
// the kinds it reads and the client built from the user's kubeconfig.
package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Scheme returns a scheme with the built-in kinds and Retryguard's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // a programming error: the built-in scheme always registers
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// ConfigFlags are the usual kubectl connection flags.
type ConfigFlags struct {
	// Kubeconfig is an explicit kubeconfig file; empty means KUBECONFIG,
	// then ~/.kube/config.
	Kubeconfig string
	// Context overrides the kubeconfig's current context.
	Context string
	// Namespace overrides the context's namespace.
	Namespace string
}

// Connect builds a client from the kubeconfig and returns it with the
// namespace to use: the flag's, else the context's, else "default".
func Connect(f ConfigFlags) (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
	overrides.Context.Namespace = f.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace of the kubeconfig context: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}
