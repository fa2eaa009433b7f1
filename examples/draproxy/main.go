// Command draproxy is a node-local proxy to the Kubernetes API server that
// confines DRA (Dynamic Resource Allocation) drivers to their own node,
// reads included.
//
// A DRA driver's kubelet plugin runs on every node and talks to the API
// server itself: it publishes the ResourceSlices of its node and reads the
// ResourceClaims it prepares. With its ServiceAccount's RBAC alone it could
// read every slice and claim in the cluster, and write any slice; the
// ValidatingAdmissionPolicies drivers ship cover writes only, and are easy
// to get wrong. Pointed at draproxy instead of the API server, a driver can
// do what a kubelet plugin needs, for its node only:
//
//	ResourceSlices  list, watch, deletecollection  only with the field selector spec.nodeName=NODE (authz.NodeScope)
//	                create                         only with spec.nodeName NODE in the body
//	                get, update, patch, delete     only of a slice whose stored spec.nodeName is NODE
//	ResourceClaims  get; update, patch of status   only of a claim reserved (status.reservedFor) for a pod whose spec.nodeName is NODE
//	                list, watch                    refused
//	Nodes           get                            only NODE itself (the slice controller reads it when not given the node's UID)
//	anything else                                  refused, unless named by --allow (then forwarded under the driver's RBAC alone)
//
// Every request is authenticated with the driver's pod-bound
// service-account token, reviewed with draproxy's own audience (--audience),
// and must be bound to a pod on this node (authz.NodeLocal: the token's
// authentication.kubernetes.io/node-name extra is --node-name). It is mapped
// to attributes as the API server maps it (httpauth.RequestInfo), and
// authorized by a SubjectAccessReview as the driver: its own RBAC still
// applies. Objects are checked by content, decoding only the fields needed
// from JSON, so draproxy depends on no version of the resource.k8s.io API.
// Refusals are Kubernetes Status objects, as the API server writes them
// (401, 403, and 503 when something could not be checked, the API server
// included), so client-go shows the reason.
//
// An allowed request is forwarded to the API server with draproxy's own
// credentials, impersonating the driver: its user, UID, groups and the
// node-name, node-uid, pod-name, pod-uid and credential-id extras. The API
// server's RBAC, the drivers' admission policies and the audit log see the
// driver (the audit event's impersonatedUser; user is draproxy). Of the
// driver's headers only Accept, Accept-Encoding, Content-Type and
// User-Agent are forwarded: Authorization, Impersonate-*, X-Remote-* and
// everything else never pass. The forwarded request is the one checked:
// the cleaned path, the query re-encoded from its parse, and the body
// draproxy read (at most --max-request-body-bytes, 3 MiB by default; more
// is 413). Watches stream through without buffering.
//
// # Protobuf
//
// client-go sends built-in types as protobuf by default. draproxy reads
// the body of a ResourceSlice create (for spec.nodeName) as JSON only: it
// answers a protobuf (or YAML, or CBOR) create with 415 and a message
// saying so, because protobuf cannot be read without the schema of each
// API version. Drivers set
//
//	cfg.ContentType = "application/json"
//
// in their rest.Config. Responses, and the bodies of other requests
// (update, patch, delete), pass through in whatever encoding.
//
// # Listening
//
// draproxy listens on a Unix socket (--socket, mode 0660, group
// --socket-group) for a hostPath directory shared with the driver pods,
// serving HTTP/1.1 and HTTP/2 without TLS (h2c), and optionally on a
// loopback TLS port (--tls-listen, HTTP/2 and HTTP/1.1) for drivers on the
// host network. A driver points unmodified client-go at the socket:
//
//	cfg := &rest.Config{
//		Host:            "http://localhost",
//		BearerTokenFile: "/var/run/secrets/draproxy/token", // projected, audience draproxy
//		ContentType:     "application/json",
//		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
//			return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/draproxy/draproxy.sock")
//		},
//	}
//
// or at https://127.0.0.1:PORT with a kubeconfig trusting the serving
// certificate (--tls-cert-file, or a self-signed one written to
// --self-signed-ca-file).
//
// # Deploying
//
// One draproxy per node, as a DaemonSet, with the node's name from the
// downward API and the socket's directory on the host:
//
//	apiVersion: apps/v1
//	kind: DaemonSet
//	metadata: {name: draproxy, namespace: dra-system}
//	spec:
//	  selector: {matchLabels: {app: draproxy}}
//	  template:
//	    metadata: {labels: {app: draproxy}}
//	    spec:
//	      serviceAccountName: draproxy
//	      containers:
//	      - name: draproxy
//	        image: example.com/draproxy
//	        args: [--node-name=$(NODE_NAME), --audience=draproxy, --socket=/var/run/draproxy/draproxy.sock]
//	        env:
//	        - name: NODE_NAME
//	          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
//	        volumeMounts: [{name: socket, mountPath: /var/run/draproxy}]
//	      volumes:
//	      - name: socket
//	        hostPath: {path: /var/run/draproxy, type: DirectoryOrCreate}
//
// The driver's DaemonSet mounts the same hostPath and a projected token
// for draproxy's audience (the kubelet binds it to the pod, hence to the
// node):
//
//	volumes:
//	- name: draproxy
//	  hostPath: {path: /var/run/draproxy}
//	- name: draproxy-token
//	  projected:
//	    sources:
//	    - serviceAccountToken: {audience: draproxy, expirationSeconds: 3600, path: token}
//
// # RBAC
//
// The driver keeps the RBAC its chart grants (resourceslices get, list,
// watch, create, update, patch, delete, deletecollection; resourceclaims
// get; resourceclaims/status update, patch; nodes get; and, since
// Kubernetes 1.37, resourceclaims/driver associated-node:update and
// associated-node:patch with resourceNames [DRIVER_NAME] to write a
// claim's status.devices): draproxy asks for it in a SubjectAccessReview,
// and the API server checks it again on the impersonated request. Because
// draproxy impersonates the node-name extra, the API server's own
// node-association checks (the associated-node verbs) work through it as
// they do for a direct call. draproxy's own ServiceAccount needs:
//
//	# Reviews: create tokenreviews and subjectaccessreviews.
//	kind: ClusterRoleBinding  # roleRef: ClusterRole system:auth-delegator
//	---
//	# Impersonating the driver's ServiceAccount: a Role in the driver's namespace.
//	kind: Role
//	metadata: {name: draproxy-impersonate, namespace: DRIVER_NS}
//	rules:
//	- apiGroups: [""]
//	  resources: [serviceaccounts]
//	  verbs: [impersonate]
//	  resourceNames: [DRIVER_SA]
//	---
//	kind: ClusterRole
//	metadata: {name: draproxy}
//	rules:
//	- apiGroups: [""]
//	  resources: [groups]
//	  verbs: [impersonate]
//	  resourceNames: ["system:serviceaccounts", "system:serviceaccounts:DRIVER_NS"]
//	- apiGroups: [authentication.k8s.io]
//	  resources: [uids]
//	  verbs: [impersonate]
//	  resourceNames: [DRIVER_SA_UID]  # optional narrowing; the UID changes if the ServiceAccount is re-created
//	- apiGroups: [authentication.k8s.io]
//	  resources:
//	  - userextras/authentication.kubernetes.io/node-name
//	  - userextras/authentication.kubernetes.io/node-uid
//	  - userextras/authentication.kubernetes.io/pod-name
//	  - userextras/authentication.kubernetes.io/pod-uid
//	  - userextras/authentication.kubernetes.io/credential-id
//	  verbs: [impersonate]
//	# Its own checks: the stored slice's node, the claim's reservations, the pods' nodes.
//	- apiGroups: [resource.k8s.io]
//	  resources: [resourceslices, resourceclaims]
//	  verbs: [get]
//	- apiGroups: [""]
//	  resources: [pods]
//	  verbs: [get]
//
// The extras' values cannot be narrowed with resourceNames: pod names,
// pod and node UIDs and credential IDs differ per pod and per token, and
// node names differ per node while one ServiceAccount serves the whole
// DaemonSet (listing every node's name narrows node-name only to the
// cluster's nodes). So draproxy, like the kubelet, is trusted with node
// identity: its credentials can claim any node's drivers. The credential
// ID is forwarded anyway: it ties each write in the audit log to the very
// token that made it, and impersonating it adds no power the pod extras do
// not already need. The API server's constrained impersonation (KEP-5284)
// cannot carry UID, groups or extras for a ServiceAccount user, so
// draproxy uses the impersonate verb.
//
// # Caches and limits
//
// A slice's spec.nodeName is immutable and is remembered for
// --slice-cache-ttl (10s; forgotten at once when the slice is deleted
// through draproxy or the API server answers 404 for it), a pod's node for
// --pod-cache-ttl (1m, keyed by the pod's UID); claims are read on every
// request, since reservations change. Each cache holds at most 4096
// entries. A missing object and another node's object are both answered
// 403, so a driver learns nothing about other nodes' objects; draproxy's
// own reads that fail are 503. Token and SubjectAccessReview caches are
// reviewauth's (--authentication-*, --authorization-* flags).
//
// Usage:
//
//	draproxy --node-name=NODE --audience=AUDIENCE [--kubeconfig=PATH] \
//	    [--socket=/var/run/draproxy/draproxy.sock] [--socket-group=GID] \
//	    [--tls-listen=127.0.0.1:PORT [--tls-cert-file=PATH --tls-private-key-file=PATH | --self-signed-ca-file=PATH]] \
//	    [--allow=VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE] ...]
//
// Without --kubeconfig it uses the in-cluster configuration, for the
// reviews and for the forwarded requests. Once serving it prints
// "serving https://ADDR" for the TLS port, then "listening on
// unix://PATH" (or "listening on https://ADDR" without a socket).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	cli.Main("draproxy", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Stdout)
	})
}

type config struct {
	socket            string
	socketGroup       int
	tlsListen         string
	nodeUID           string
	allow             []string
	rules             []rule
	driver            []string
	drivers           *drivers
	requireAdmission  bool
	admissionPolicy   string
	admissionBinding  string
	admissionInterval time.Duration
	requestTimeout    time.Duration
	sliceTTL, podTTL  time.Duration
	maxBody           int64
	flags             *cli.Flags
	review            *serving.Flags
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{flags: cli.New()}
	c.review = &c.flags.Review
	fs := pflag.NewFlagSet("draproxy", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.socket, "socket", "/var/run/draproxy/draproxy.sock", "Unix socket to serve on (mode 0660), in a directory shared with driver pods; empty for none")
	fs.IntVar(&c.socketGroup, "socket-group", -1, "group ID to give the socket; -1 keeps the process's group")
	fs.StringVar(&c.tlsListen, "tls-listen", "", "loopback address to serve TLS on, such as 127.0.0.1:8443; empty for none")
	fs.StringVar(&c.nodeUID, "node-uid", "", "UID of this node; when set, drivers' tokens must carry it too (node-uid extra)")
	fs.StringArrayVar(&c.allow, "allow", nil, "VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE] to forward under the driver's RBAC alone, such as get,list,watch:deviceclasses.resource.k8s.io (repeatable)")
	fs.StringArrayVar(&c.driver, "driver", nil, "NAME=NAMESPACE/SERVICEACCOUNT: the DRA driver name NAME may be published (spec.driver of the ResourceSlices written) by that ServiceAccount only, such as gpu.example.com=gpu-driver/kubelet-plugin (repeatable; at least one)")
	fs.BoolVar(&c.requireAdmission, "require-admission-policy", true, "refuse to start unless the ValidatingAdmissionPolicy and binding of deploy/admission-policy.yaml are in place, with a parameter listing every --driver identity; false serves without them (logged, and draproxy_admission_policy_verified is 0)")
	fs.StringVar(&c.admissionPolicy, "admission-policy", DefaultAdmissionPolicy, "name of the ValidatingAdmissionPolicy to check")
	fs.StringVar(&c.admissionBinding, "admission-policy-binding", DefaultAdmissionPolicy, "name of the ValidatingAdmissionPolicyBinding to check")
	fs.DurationVar(&c.admissionInterval, "admission-policy-check-interval", DefaultAdmissionCheckInterval, "how often to check, after the start, that the admission policy is still in place")
	fs.DurationVar(&c.requestTimeout, "request-timeout", DefaultRequestTimeout, "deadline of every forwarded request but watches, as the API server's own --request-timeout: 504 with Retry-After past it")
	fs.DurationVar(&c.sliceTTL, "slice-cache-ttl", 0, "no effect: draproxy reads a ResourceSlice on every request that needs it")
	_ = fs.MarkDeprecated("slice-cache-ttl", "draproxy no longer remembers ResourceSlices; the flag has no effect")
	fs.DurationVar(&c.podTTL, "pod-cache-ttl", DefaultPodTTL, "how long a pod's spec.nodeName is remembered (by UID); 0 disables the cache")
	fs.Int64Var(&c.maxBody, "max-request-body-bytes", DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	c.flags.AddFlags(fs, true) // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --node-name, --authentication-*, --authorization-*, --tls-* (for --tls-listen), --self-signed-ca-file
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.flags.Version {
		return c, nil
	}
	if err := c.flags.TLS.Validate(); err != nil {
		return nil, fmt.Errorf("draproxy: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("draproxy: unexpected arguments %q", fs.Args())
	case c.review.Authz.NodeName == "":
		return nil, errors.New("draproxy: --node-name is required")
	case len(c.review.Audiences) == 0 && len(c.review.Authn.Audiences) == 0:
		return nil, errors.New("draproxy: --audience is required: drivers must request tokens for this proxy's audience")
	case c.socket == "" && c.tlsListen == "":
		return nil, errors.New("draproxy: --socket or --tls-listen is required")
	case len(c.review.Authz.AlwaysAllowGroups) > 0:
		return nil, errors.New("draproxy: --authorization-always-allow-groups is not supported: every request is checked")
	case c.podTTL < 0:
		return nil, errors.New("draproxy: --pod-cache-ttl must not be negative")
	case c.requestTimeout <= 0:
		return nil, errors.New("draproxy: --request-timeout must be positive")
	case c.admissionInterval <= 0:
		return nil, errors.New("draproxy: --admission-policy-check-interval must be positive")
	case c.maxBody <= 0:
		return nil, errors.New("draproxy: --max-request-body-bytes must be positive")
	}
	if c.tlsListen != "" {
		if err := checkLoopback(c.tlsListen); err != nil {
			return nil, fmt.Errorf("draproxy: %w", err)
		}
	}
	var err error
	if c.drivers, err = parseDrivers(c.driver); err != nil {
		return nil, fmt.Errorf("draproxy: %w", err)
	}
	for _, a := range c.allow {
		r, err := parseAllow(a)
		if err != nil {
			return nil, fmt.Errorf("draproxy: %w", err)
		}
		c.rules = append(c.rules, r)
	}
	return c, nil
}

// newAdmissionCheckFor is the admission policy check of c, reading with
// the API server's configuration up (draproxy's own credentials).
func newAdmissionCheckFor(up *rest.Config, c *config) (*admissionCheck, error) {
	host, _, err := rest.DefaultServerUrlFor(up)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's URL: %w", err)
	}
	base, err := rest.TransportFor(up)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's transport: %w", err)
	}
	return newAdmissionCheck(newObjects(&http.Client{Transport: base}, host, clock.RealClock{}, -1), c.admissionPolicy, c.admissionBinding, c.drivers)
}

// upstreamConfig is the API server with draproxy's own credentials: the
// kubeconfig at path, or the in-cluster configuration.
func upstreamConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// ttl turns a flag's 0 ("disabled") into newProxy's negative.
func ttl(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// run parses args and serves until ctx is done, then shuts down: the
// listeners close, in-flight requests (watches included) are cancelled,
// and the socket is removed.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	started, err := c.flags.Start(ctx, "draproxy", stdout)
	if errors.Is(err, cli.ErrVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("draproxy: %w", err)
	}
	defer started.Stop()
	built := started.Built
	up, err := upstreamConfig(c.review.Kubeconfig)
	if err != nil {
		return fmt.Errorf("draproxy: --kubeconfig: %w", err)
	}
	handler, err := newProxy(options{
		NodeName:       c.review.Authz.NodeName,
		NodeUID:        c.nodeUID,
		Drivers:        c.drivers,
		Authenticator:  built.Authenticator,
		SAR:            built.SAR,
		Upstream:       up,
		Allow:          c.rules,
		PodTTL:         ttl(c.podTTL),
		RequestTimeout: c.requestTimeout,
		MaxBodyBytes:   c.maxBody,
		Metrics:        built.Metrics,
	})
	if err != nil {
		return err
	}

	// The second line: the API server's own check of every ResourceSlice
	// write (deploy/admission-policy.yaml), checked now and then every
	// --admission-policy-check-interval.
	admission, err := newAdmissionCheckFor(up, c)
	if err != nil {
		return err
	}
	if err := built.Registry.Register(admission.Collector()); err != nil {
		return fmt.Errorf("draproxy: %w", err)
	}
	clk := clock.RealClock{}
	checkCtx, stopCheck := withDeadline(ctx, clk, c.requestTimeout)
	err = admission.check(checkCtx)
	stopCheck()
	admission.log(ctx, err)
	if err != nil && c.requireAdmission {
		return fmt.Errorf("%w (--require-admission-policy=false serves without it)", err)
	}

	// Requests, watches included, end when serving ends.
	serverOpts := serving.ServerOptions{MaxConnections: c.flags.MaxConnections, CancelOnShutdown: true, Health: started.Health}
	type server struct {
		srv *serving.HTTPServer
		ln  net.Listener
	}
	var servers []server
	defer func() {
		for _, s := range servers {
			s.ln.Close()
		}
	}()
	var listening string
	if c.tlsListen != "" {
		c.flags.TLS.SANs = append(c.flags.TLS.SANs, cli.SANsFor(c.tlsListen)...)
		certs, err := c.flags.TLS.Certificates("draproxy", "")
		if err != nil {
			return fmt.Errorf("draproxy: %w", err)
		}
		defer certs.Close()
		opts := serverOpts
		opts.Certificates = certs
		srv, err := serving.NewHTTPServer(handler, opts)
		if err != nil {
			return fmt.Errorf("draproxy: %w", err)
		}
		ln, err := net.Listen("tcp", c.tlsListen)
		if err != nil {
			return fmt.Errorf("draproxy: --tls-listen: %w", err)
		}
		servers = append(servers, server{srv, ln})
		listening = "https://" + ln.Addr().String()
		if c.socket != "" {
			if _, err := fmt.Fprintf(stdout, "serving %s\n", listening); err != nil {
				return err
			}
		}
	}
	if c.socket != "" {
		ln, remove, err := listenUnix(c.socket, c.socketGroup)
		if err != nil {
			return fmt.Errorf("draproxy: --socket: %w", err)
		}
		defer remove()
		// h2c (HTTP/2 with prior knowledge) and HTTP/1.1 on the socket.
		opts := serverOpts
		opts.UnencryptedHTTP2 = true
		srv, err := serving.NewHTTPServer(handler, opts)
		if err != nil {
			ln.Close()
			return fmt.Errorf("draproxy: %w", err)
		}
		servers = append(servers, server{srv, ln})
		listening = "unix://" + c.socket
	}
	started.Health.SetReady(true) // the listeners are open: connections queue until Serve
	if _, err := fmt.Fprintf(stdout, "listening on %s\n", listening); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving", "address", listening, "node", c.review.Authz.NodeName, "audiences", built.Authenticator.Audiences())

	// Every server stops when ctx is done or any of them fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer started.Health.SetReady(false)
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			errs[i] = s.srv.Serve(ctx, s.ln)
			cancel()
		})
	}
	// The admission policy, again every interval, until serving ends.
	wg.Go(func() { admission.run(ctx, clk, c.admissionInterval, c.requestTimeout, nil) })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("draproxy: %w", err)
	}
	return nil
}
