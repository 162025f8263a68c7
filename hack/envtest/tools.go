//go:build tools

// Package tools pins the commands that envtest-assets.sh builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
