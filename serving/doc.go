// Package serving is the glue between reviewauth and a server: the
// command-line flags of a protected service and what they build, and HTTP
// and gRPC servers hardened against clients that hold connections.
//
// # Flags
//
// [Flags] registers authn's, authz's and httpauth's flags (k8s.io/apiserver's
// delegated authentication and authorization names) and
// --authentication-jwks-preverify (on by default: see authn.PreVerifier);
// [Flags.Build] builds the authenticator,
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
// timeout, keepalive enforcement, idle connections, streams, metadata size,
// the connection budget, and a bound on streams a client resets (HTTP/2
// rapid reset). [Health] serves /healthz, /livez and /readyz.
//
// # Admission: a legitimate caller always gets through
//
// Both servers admit connections through one implementation
// ([LimitListener]) that follows each connection's protocol state: the
// TLS handshake (through the server's tls.Config), and HTTP requests
// (http.Server.ConnContext and the handler) or gRPC calls (a stats handler
// and a tap handle joined to the connection). When the budget
// (MaxConnections) is full, a new connection is admitted by closing the
// one that has done the least for the longest: silent connections first,
// then those whose every request was refused, those waiting with no
// request (slowloris, an HTTP/2 preface or gRPC streams without a
// message), unfinished handshakes, idle keep-alives, connections on their
// first request, and last, connections that completed a request and have
// one in progress. Within a stage the source (client address) holding the
// most connections loses one first, then the oldest. Connections waiting
// for room are admitted newest first, a source at a time. Timeouts of the
// first stages shrink as the budget fills; TLS handshakes are computed at
// most GOMAXPROCS at once, shared fairly between sources (no per-source
// rate by default: where callers share an address, a flood would spend it
// for them); the review path shares its in-flight reviews fairly between
// sources and reviews verified tokens first (see authn.PreVerifier).
//
// # Sizing the budget
//
// Size MaxConnections for the clients you expect, with room to spare, and
// below the process's open-file limit (RLIMIT_NOFILE, `ulimit -n`; the
// container runtime's default is often 1,048,576, systemd's 1,024 soft):
//
//	files ≈ MaxConnections                (admitted client connections)
//	      + MaxConnections                (upstream connections, for a proxy)
//	      + min(MaxConnections, 64)       (connections waiting to be admitted)
//	      + 1                             (one being swapped in)
//	      + about 64                      (listeners, API server, certificates, logs)
//
// [MaxConnectionsFor] applies that rule to the limit in force, and the
// default budget (1,024) is capped by it. A budget too small for the
// legitimate clients makes them displace each other (an idle keep-alive is
// closed for a newcomer); a budget far above them only lets a flood hold
// more files. A node agent with a handful of local clients needs tens; a
// proxy in front of a metrics endpoint scraped by a few Prometheus
// replicas, a few hundred. reviewauth_connections{state="admitted"} and
// reviewauth_connections_closed_total (see [LimitOptions].Metrics) show
// how full it runs and what admission closed.
//
// No goroutine outlives the Serve call that started it; log lines go to
// klog.FromContext of the context given to Serve or Build, paced where a
// client could otherwise make one per request.
package serving
