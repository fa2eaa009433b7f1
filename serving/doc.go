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
// HTTP/2 streams and the requests a client resets (HTTP/2 rapid reset: a
// connection past the bound that was never served is parked, read no
// more, rather than closed to reconnect: the first budget's worth outside
// the budget (fewer where memory is short: [ParkedMemory]), where they
// hold no one's room, the rest within it, the
// first to go for a newcomer; once parked 10 s with no connection waiting
// for room, they are closed one per EvictionInterval, so that one whose
// client died is not held until the client's kernel gives up, and all at
// once when shutdown starts); it closes the connection after
// a refusal without reading the request body, so that an unauthenticated
// client can neither keep connections alive nor make the server wait for
// a body it never sends.
// [GRPCServerOptions] and [ServeGRPC] do the same for gRPC: handshake
// timeout, keepalive enforcement, idle connections, streams, metadata size,
// the connection budget, and a bound on streams a client resets (HTTP/2
// rapid reset; parked past it, as HTTP/2 connections are). [Health]
// serves /healthz, /livez and /readyz.
//
// # Admission: a legitimate caller always gets through
//
// Both servers admit connections through one implementation
// ([LimitListener]) that follows each connection's protocol state: the
// TLS handshake (through the server's tls.Config), and HTTP requests
// (http.Server.ConnContext and the handler) or gRPC calls (a stats handler
// and a tap handle joined to the connection). When the budget
// (MaxConnections) is full, a new connection is admitted by closing one
// that made no progress: a connection that moved bytes for a request in
// progress, or served one, within the last five seconds (a watch, a
// stream, a download, an upload, a scraper's keep-alive) is closed only
// when no other is admitted, not even one in its grace. Among the others,
// silent connections go first, then those whose every request was
// refused, those waiting with no request (slowloris, an HTTP/2 preface or
// gRPC streams without a message), unfinished handshakes, idle
// keep-alives, connections on their first request, and last, connections
// that completed a request and have one in progress. Within a stage the
// source (client address) holding the most connections loses one first,
// then the youngest (under a flood, the attackers' reconnections). The
// policy is in policy.go, its bookkeeping in admission.go. A connection is
// closed to make room only for a newcomer (not for a presumed reconnection
// of one closed in the last second, nor for one that has waited a second):
// a flood's connections stay parked, at the cost of their files, rather
// than closed and reconnected. A connection with 8 requests refused and
// none served is closed, or, while connections wait for room, parked
// (read no more) until one is needed or none waits; a waiting connection
// whose client closed its end is taken out when its address next
// connects, and that arrival presumed its reconnection. Connections waiting for room are admitted
// newest first, a source at a time. Timeouts do not shrink as the budget
// fills unless PressureTimeout is set; TLS handshakes are computed at
// most GOMAXPROCS at once, shared fairly between sources (no per-source
// rate by default: where callers share an address, a flood would spend it
// for them); the review path shares its in-flight reviews fairly between
// sources and reviews verified tokens first (see authn.PreVerifier).
//
// # Sizing the budget
//
// The default budget ([DefaultBudget]) is read from the process's limits,
// not fixed: an idle or waiting connection costs a file and some memory,
// while one closed to make room reconnects and costs a TLS handshake, so
// connections are kept as long as files and memory allow. It is the
// smaller of a third of the open-file limit less 128 and a quarter of the
// memory limit at [ConnectionMemory] (128 KiB) a connection:
//
//	files ≈ MaxConnections                (admitted client connections)
//	      + MaxConnections                (connections waiting to be admitted)
//	      + MaxConnections                (upstream connections, for a proxy,
//	                                       or connections parked past the
//	                                       rapid-reset bound, which have none)
//	      + 1                             (one being swapped in)
//	      + about 64                      (listeners, API server, certificates, logs)
//
// Connections parked outside the budget (past the rapid-reset bound, for
// their refusals, or never served while connections wait) hold what they
// held when parked, up to about 200 KiB each (the sidecar's junk-token
// connections, docs/benchmarks.md): as many as the budget, at most, and
// no more than a quarter of the memory limit holds at [ParkedMemory]
// (256 KiB) each. So admitted, waiting and parked connections each have a
// quarter of the memory limit at most, and the process keeps a quarter:
// a container of 128 MiB admits 256, lets 256 wait, parks 128.
//
// As many connections may wait to be admitted as are admitted: accepted,
// nothing read from them, each holding a file and a kernel socket and no
// memory of the process's; and more while the process has files to spare
// (more than 128 free under its open-file limit, counted from
// /proc/self/fd at most every 50 ms as they are accepted) and memory (a
// quarter of the memory limit at [WaitingMemory], 128 KiB, each): the
// files the budget keeps for a proxy's upstream connections are the
// flood's while the upstream does not use them, and given back, the
// longest waiting closed first, when it does. A flood therefore waits
// where admission chooses among it (newest first, sources in turn) until
// the process is out of files, and a newcomer is admitted at the next
// turn; in the kernel's queue, first come first served, it would wait for
// an admission per attacker ahead of it (with 64 waiting, rbacproxy under
// junk tokens at 1.75 times its budget got 0% of new connections through
// within 1 s; with the budget's worth waiting, idle TLS connections from
// one address at 2.25 times it, 0%, where kube-rbac-proxy, which holds
// every connection it accepts until it is out of files, answered 100%).
//
// The open-file limit is RLIMIT_NOFILE as Go leaves it (Go raises the
// soft limit to the hard one at start; serving changes nothing): the
// container runtime's default is 524,288 or 1,048,576, systemd's hard
// limit 524,288. The memory limit is GOMEMLIMIT if set, else the cgroup's
// (a container's resources.limits.memory), else the machine's. A
// container with 128 MiB gets 256 connections; one with 1 GiB, 2,048; a
// process with neither limit set low, a third of its files. Set MaxConnections
// to bound it further (a node agent with a handful of local clients needs
// tens). reviewauth_connections{state="admitted"} (and "waiting",
// "parked": outside the budget, past the rapid-reset bound) and
// reviewauth_connections_closed_total (see [LimitOptions].Metrics) show
// how full it runs and what admission closed.
//
// No goroutine outlives the Serve call that started it; log lines go to
// klog.FromContext of the context given to Serve or Build, paced where a
// client could otherwise make one per request.
package serving
