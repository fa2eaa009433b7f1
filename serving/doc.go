// Package serving is the glue between reviewauth and a server: the
// command-line flags of a protected service and what they build, and HTTP
// and gRPC servers hardened against clients that hold connections.
//
// # Flags
//
// [Flags] registers authn's, authz's and httpauth's flags (k8s.io/apiserver's
// delegated authentication and authorization names) and
// --authentication-jwks-preverify; [Flags.Build] builds the authenticator,
// the authorizer chain and a Prometheus registry, and checks at start that
// the service may create the reviews it will send. [TLSFlags] registers
// --tls-cert-file, --tls-private-key-file, --tls-min-version,
// --tls-cipher-suites and --tls-san and builds [Certificates]: the serving
// certificate and the client CA, reloaded when their files change, with
// k8s.io/apiserver's dynamic certificate controllers.
//
// A protected HTTP service is then a few lines:
//
//	var f serving.Flags
//	var tlsf serving.TLSFlags
//	f.AddFlags(fs)
//	f.AddHTTPFlags(fs)
//	tlsf.AddFlags(fs)
//	// parse
//	built, err := f.Build(ctx)
//	certs, err := tlsf.Certificates("my-service", f.HTTP.ClientCAFile)
//	protect, err := built.Middleware(httpauth.NonResource(), certs)
//	srv, err := serving.NewHTTPServer(protect(handler), serving.ServerOptions{Certificates: certs})
//	err = srv.Serve(ctx, ln)
//
// # controller-runtime
//
// [MetricsFilterProvider] is a metricsserver.Options.FilterProvider for a
// controller-runtime manager (kubebuilder protects every operator's
// /metrics with controller-runtime's filters.WithAuthenticationAndAuthorization):
// the same RBAC contract (get on the nonResourceURL /metrics), reviewauth's
// caches, coalescing and answers (503, not 500, when the API server cannot
// be asked), the audience reviewauth requires ([MetricsFilterOptions] says
// how to give Prometheus a token for it), and reviewauth's metrics on
// controller-runtime's registry. This package does not import
// controller-runtime; examples/controllerruntime runs a manager with it.
//
// # Servers
//
// [HTTPServer] bounds what one client can hold: connections
// ([LimitListener]), header, body, per-write and idle times, header size,
// HTTP/2 streams; it closes the connection after a refusal without reading
// the request body, so that an unauthenticated client can neither keep
// connections alive nor make the server wait for a body it never sends.
// [GRPCServerOptions] and [ServeGRPC] do the same for gRPC: handshake
// timeout, keepalive enforcement, idle connections, streams, metadata size
// and the connection cap. [Health] serves /healthz, /livez and /readyz.
//
// No goroutine outlives the Serve call that started it; log lines go to
// klog.FromContext of the context given to Serve or Build, paced where a
// client could otherwise make one per request.
package serving
