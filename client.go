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
	// rate limiter. Zero means [DefaultQPS] and [DefaultBurst]. Negative is
	// refused by the flags' Validate.
	QPS   float32
	Burst int
}

// Limits of the clients authn.NewForConfig, authz.NewForConfig,
// authn.NewJWKSVerifier and grpcauth.NewTokenRequestSourceForConfig build.
const (
	// DefaultQPS and DefaultBurst limit a client when its rest.Config (or
	// [ClientOptions]) leaves them zero. client-go's own default, 5 QPS,
	// throttles reviews into multi-second waits (Istio #27945, Authorino
	// #568). These match k8s.io/apiserver's delegated options; caching,
	// coalescing and the in-flight bounds keep real traffic far below
	// them.
	DefaultQPS   = 200
	DefaultBurst = 400

	// MaxAnswerBytes bounds the body of an answer, beyond the size of the
	// request sent (an answer echoes its spec, a TokenReview's token
	// included). A TokenReview or SubjectAccessReview answer is a few KiB:
	// the spec echoed, and a status with a user's name, UID, groups and
	// extra; 256 KiB leaves room for users with thousands of groups, while
	// 16 reviews in flight per kind hold no more than a few MiB. An answer
	// of exactly this size is read; one byte more is "could not check" (a
	// *[ReviewError] matching [ErrUnavailable]), is not retried and is not
	// cached.
	MaxAnswerBytes = 256 << 10
)
