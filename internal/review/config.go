package review

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads the configuration of a review client: from the
// kubeconfig file at path, or the in-cluster configuration when path is
// empty, with the given QPS and burst (zero leaves the caller's defaults to
// apply).
func RESTConfig(path string, qps float32, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

// ClientOptions says how to reach the API server that answers reviews:
// authn.ClientOptions and authz.ClientOptions are this type.
type ClientOptions struct {
	// Kubeconfig is the path of a kubeconfig file. Empty means the
	// in-cluster configuration.
	Kubeconfig string
	// QPS and Burst limit the review client. Zero means the package's
	// DefaultQPS and DefaultBurst (200 and 400).
	QPS   float32
	Burst int
}

// RESTConfig loads the configuration o describes.
func (o ClientOptions) RESTConfig() (*rest.Config, error) {
	return RESTConfig(o.Kubeconfig, o.QPS, o.Burst)
}
