//go:build tools

// Package kube pins the Kubernetes control-plane commands this module builds
// for tests: kube-apiserver, kube-controller-manager, kube-scheduler and kwok
// (etcd lives in ./cmd/etcd). See scripts/kube-binaries.sh.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
