//go:build tools

// Package etcd only records the build dependency on the etcd server.
package etcd

import _ "go.etcd.io/etcd/server/v3"
