package reviewauth

// ClientOptions says how authn and authz reach the API server that answers
// their reviews, as set from the command line by authn.Flags and
// authz.Flags (the Client field of each). The zero value is the in-cluster
// configuration with the review client's default limits. It is plain data:
// safe to copy, and to read concurrently.
type ClientOptions struct {
	// Kubeconfig is the path of a kubeconfig file. Empty means the
	// in-cluster configuration (the pod's service account).
	Kubeconfig string
	// QPS and Burst limit the review client with client-go's token-bucket
	// rate limiter. Zero means 200 and 400 (authn.DefaultQPS and
	// authn.DefaultBurst, the same as authz's), k8s.io/apiserver's
	// delegated defaults: client-go's own 5 QPS throttles reviews into
	// multi-second waits. Negative is refused by the flags' Validate.
	QPS   float32
	Burst int
}
