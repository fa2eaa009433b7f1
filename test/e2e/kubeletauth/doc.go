// Package kubeletauth checks httpauth's kubelet mappers against the
// kubelet's own code, k8s.io/kubernetes v1.37.2 pkg/kubelet/server: its
// attributes getter (NewNodeAuthorizerAttributesGetter) over a corpus of
// paths and methods, and its HTTP server (NewServer, with the real
// go-restful container and mux in front of the auth filter) over the same
// paths sent on the wire. It needs no cluster: `go test ./kubeletauth` in
// the e2e module.
package kubeletauth
