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
