// Package suite holds reviewauth's end-to-end tests against a real
// kube-apiserver; see package cluster. Run them with test/e2e/run.sh.
package suite
