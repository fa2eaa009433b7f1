// Package reviewauth is Kubernetes delegated authentication and
// authorization for node agents, CSI sidecars and DRA plugins.
//
// The full overview is written once the packages land; see the README.
package reviewauth
