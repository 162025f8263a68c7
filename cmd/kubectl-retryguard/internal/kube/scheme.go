// Package kube holds what the plugin shares with a cluster: the scheme of
// the kinds it reads and the client built from the user's kubeconfig.
package kube

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// Scheme returns a scheme with the built-in kinds and Retryguard's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // a programming error: the built-in scheme always registers
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Connect builds a client from kubectl's connection flags (cli-runtime's
// ConfigFlags: --kubeconfig, --context, -n, --as, --as-group, ...) and
// returns it with the namespace to use: the flag's, else the context's,
// else "default".
func Connect(f genericclioptions.RESTClientGetter) (client.Client, string, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns, _, err := f.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace of the kubeconfig context: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}
