//go:build tools

// Package kube only records the build dependency on kube-apiserver.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
