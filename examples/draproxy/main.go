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
//	ResourceSlices  list, watch                    only with the field selector spec.nodeName=NODE (authz.NodeScope)
//	                deletecollection               only with spec.nodeName=NODE and spec.driver=one of the caller's drivers
//	                get                            the API server's answer, passed on only if bound to NODE
//	                create, apply                  the body: spec.nodeName NODE, no other node binding, spec.driver the caller's
//	                update, patch, delete          the slice as it is now (read for the request): bound to NODE and of the
//	                                               caller's driver; forwarded with its UID as a precondition (and the body checked)
//	ResourceClaims  get                            the API server's answer, passed on only if reserved (status.reservedFor) for a pod on NODE
//	                update, patch of status        the claim as it is now, reserved for a pod on NODE; forwarded with its UID as a precondition
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
// Refusals are Kubernetes Status objects, as the API server writes them,
// each naming what is missing (400, 401, 403, 404, 406, 409, 413, 415; 503
// or, past the request's deadline, 504, both with Retry-After, when
// something could not be checked, the API server included), so client-go
// shows the reason.
//
// # Nothing remembered, names are not objects
//
// A ResourceSlice's spec.nodeName is immutable, but its name is not an
// object: a slice can be deleted (by a deletecollection, by another actor)
// and a slice of the same name created for another node. So draproxy never
// lets a decision rest on what it once saw. A get is a checked read:
// draproxy asks the API server for the slice as JSON (whatever the
// driver's Accept; client-go decodes an answer by its Content-Type), reads
// the whole answer, checks that it is that slice (kind, apiVersion, name,
// UID) and that it is bound to this node alone (spec.nodeName, no
// allNodes, nodeSelector or perDeviceNodeSelection), and only then passes
// it on; a slice of another node and a missing one are both the API
// server's 404, with a message saying why, so a driver learns nothing
// about other nodes' slices. A get asking for a Table or
// PartialObjectMetadata (Accept: ...;as=...), which carry no spec, is 406.
// An update, patch or delete reads the slice as it is now, and carries its
// UID as a precondition the API server enforces (metadata.uid in an
// update, a merge, strategic merge or apply patch; a leading test of
// /metadata/uid in a JSON patch; preconditions.uid in DeleteOptions, the
// options of a delete without a body moved into one): whatever happens to
// the name between draproxy's read and the write, the write applies to the
// slice draproxy checked or to nothing (409). The UID is the only
// precondition draproxy adds, so a driver's unconditional patch does not
// start failing on every concurrent change; a UID the driver set itself
// is kept when it is the slice's (the upstream ResourceSlice controller
// deletes with one) and refused (409) when it is not. Anything that can
// create, a create or a server-side apply (which creates a missing name),
// is checked on its body exactly as a create is; an apply to an existing
// slice is checked both ways. The bodies of a patch are checked too: a
// merge or strategic merge patch may set spec.nodeName only to this node
// and spec.driver only to the caller's, and neither remove spec nor carry
// $patch or $retainKeys; a JSON patch may not write what binds a slice
// (the API server keeps nodeName and driver immutable anyway). Every object
// draproxy reads, for a decision or to pass on, is checked to be the one
// asked for, whole: an empty object, a Status or another object answered
// with 200, a truncated answer, an answer that is not JSON are "could not
// check" (503), never a refusal, never remembered. The only thing
// remembered is a pod's node, by the pod's UID (--pod-cache-ttl), and only
// to decide on claims.
//
// # Driver names
//
// --driver=NAME=NAMESPACE/SERVICEACCOUNT (repeatable, at least one) binds
// each DRA driver name to the ServiceAccounts that may publish it: a
// ResourceSlice whose spec.driver is not bound to the caller is refused on
// create and on every write, and a deletecollection must select one of the
// caller's drivers (spec.driver=NAME). A second driver identity on the same
// node cannot touch another's slices. The admission policy below binds the
// same names to the same identities.
//
// # The admission policy: the API server's own check of every write
//
// draproxy is the first line. The second is in the API server itself,
// atomic with the write and whether or not the driver goes through
// draproxy: a ValidatingAdmissionPolicy and its binding
// (deploy/admission-policy.yaml) that refuse a ResourceSlice create,
// update or delete (a deletecollection is admitted item by item) by a
// listed driver identity unless the new object (and, for an update or a
// delete, the old one) has spec.nodeName equal to the node in the writer's
// authentication.kubernetes.io/node-name extra, no other node binding, and
// spec.driver one of the names bound to that identity:
//
//	apiVersion: admissionregistration.k8s.io/v1
//	kind: ValidatingAdmissionPolicy
//	metadata: {name: draproxy-resourceslices}
//	spec:
//	  failurePolicy: Fail
//	  paramKind: {apiVersion: v1, kind: ConfigMap}
//	  matchConstraints:
//	    resourceRules:
//	    - {apiGroups: [resource.k8s.io], apiVersions: ["*"], operations: [CREATE, UPDATE, DELETE], resources: [resourceslices]}
//	  matchConditions:
//	  - name: listed-driver-identity
//	    expression: request.userInfo.username == "system:serviceaccount:" + params.data.serviceAccount.replace("/", ":")
//	  variables: [nodeNames, node, drivers]  # the extra's one value; the parameter's driver names
//	  validations:                           # each with a message naming what is wrong
//	  - expression: variables.node != ""
//	  - expression: request.operation == "DELETE" || (has(object.spec.nodeName) && object.spec.nodeName == variables.node)
//	  - expression: request.operation == "DELETE" || (no allNodes, nodeSelector or perDeviceNodeSelection)
//	  - expression: request.operation == "DELETE" || object.spec.driver in variables.drivers
//	  - expression: request.operation == "CREATE" || (oldObject of variables.node and of variables.drivers)
//	---
//	kind: ValidatingAdmissionPolicyBinding
//	metadata: {name: draproxy-resourceslices}
//	spec:
//	  policyName: draproxy-resourceslices
//	  validationActions: [Deny]
//	  paramRef:
//	    namespace: dra-system   # draproxy's
//	    selector: {matchLabels: {draproxy.reviewauth.io/driver-identity: "true"}}
//	    parameterNotFoundAction: Allow
//
// Which identities it confines is said by its parameters, one ConfigMap
// per driver ServiceAccount in draproxy's namespace
// (deploy/driver/driver-identity.yaml):
//
//	data:
//	  serviceAccount: gpu-driver/kubelet-plugin
//	  drivers: gpu.example.com
//
// It matches on the listed ServiceAccount and the node-name extra, never on
// the extra alone: every pod-bound token carries the extra, a central DRA
// controller's included, which legitimately publishes nodeSelector and
// allNodes slices and is not listed, so not confined. A parameter without
// serviceAccount or drivers is an error, and with failurePolicy Fail an
// error refuses every ResourceSlice write: a broken parameter is loud,
// never silently permissive. The node-name extra is in every token bound
// to a pod that has a node (GA since Kubernetes 1.32; draproxy forwards it
// by impersonation); where it is absent (a legacy Secret token, a token
// bound to no pod, an older cluster), a listed identity can write no
// ResourceSlice at all.
//
// draproxy checks, at start and then every --admission-policy-check-interval
// (1m), that the policy and its binding exist and mean what they should:
// the policy's matchConditions, variables and validations are those
// draproxy ships (it embeds deploy/admission-policy.yaml), failurePolicy is
// Fail, its match covers every ResourceSlice write and is not narrowed by
// selectors or exclusions, kube-controller-manager's type checking (when it
// has run) found nothing; the binding binds it with Deny, is not narrowed,
// and its parameters list every identity draproxy serves (--driver) with
// exactly the same driver names. Missing, changed or unreadable, it says so
// in an error log line and in the metric draproxy_admission_policy_verified
// (0), and at start it is an error unless --require-admission-policy=false.
// The periodic check runs with the servers and stops with them.
//
// # Deadlines and dead links
//
// Every forwarded request but a watch has a deadline, --request-timeout
// (1m, the API server's own default): a request still unanswered then is
// answered 504 with Retry-After, and an answer still arriving is cut off,
// never completed to look whole (as an answer the API server breaks off
// is). A connection failure before the answer is draproxy's 503 with
// Retry-After. A quiet watch is legitimately silent until its own timeout,
// so watches are not cut for silence: they end, in an error the driver
// sees, when the link to the API server is dead. Over HTTP/2 (the API
// server's TLS port) client-go's health check pings a connection that has
// been silent for HTTP2_READ_IDLE_TIMEOUT_SECONDS (30) and closes it if no
// answer comes within HTTP2_PING_TIMEOUT_SECONDS (15): a watch whose link
// died ends within 45 s. Over HTTP/1.1 only TCP keepalive (30 s, 9 probes)
// notices, within about 5 minutes. The deprecated watch path form
// (/apis/GROUP/VERSION/watch/RESOURCE[/NAME]) is read as the list form the
// API server serves it as (?watch=true, and fieldSelector=metadata.name=NAME
// for one object), so its selector is the one authorized and forwarded; a
// watch of one slice (metadata.name=X) must also select the node
// (spec.nodeName=NODE), and is refused with a message naming it otherwise.
//
// # Protobuf, YAML and CBOR
//
// client-go sends built-in types as protobuf by default. draproxy reads
// the bodies of the writes it checks (and rewrites them with a UID
// precondition) as JSON, or YAML converted strictly (duplicate keys
// refused) to JSON as the API server converts it: it answers a protobuf
// or CBOR body (and a patch of another type) with 415 and a message
// saying so, because protobuf cannot be read or rewritten without the
// schema of each API version, and CBOR is alpha (CBORServingAndStorage,
// off by default) in Kubernetes 1.37. Drivers set
//
//	cfg.ContentType = "application/json"
//
// in their rest.Config. Answers, and requests draproxy does not check by
// body, pass through in whatever encoding.
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
// --self-signed-ca-file). Health (/healthz, /livez, /readyz) and /metrics
// are served on --metrics-listen, a TCP port the kubelet's probes reach.
//
// # Deploying
//
// deploy/ holds draproxy (kubectl apply -k examples/draproxy/deploy; its
// kustomization.yaml says what to edit: namespace, image, --driver,
// --audience), and deploy/driver/ one DRA driver's part, applied once per
// driver (kubectl apply -k examples/draproxy/deploy/driver after
// replacing its namespace, gpu-driver, its driver name, gpu.example.com,
// and the example kubelet plugin; the ServiceAccount's name and namespace
// follow into the parameter and the RBAC by themselves):
//
//	deploy/namespace.yaml                dra-system, Pod Security "privileged" (the socket's hostPath needs it)
//	deploy/serviceaccount.yaml           draproxy's ServiceAccount
//	deploy/rbac.yaml                     draproxy's own RBAC (below)
//	deploy/admission-policy.yaml         the ValidatingAdmissionPolicy and its binding (above)
//	deploy/daemonset.yaml                draproxy on every node
//	deploy/driver/namespace.yaml         the driver's namespace, Pod Security "privileged" (its hostPath)
//	deploy/driver/serviceaccount.yaml    the kubelet plugin's ServiceAccount
//	deploy/driver/rbac.yaml              the driver's RBAC (below)
//	deploy/driver/draproxy-rbac.yaml     draproxy's permission to impersonate that ServiceAccount and its namespace's group
//	deploy/driver/driver-identity.yaml   the policy's parameter for the driver, in draproxy's namespace
//	deploy/driver/daemonset.yaml         the kubelet plugin: the socket's directory, its group, a token for draproxy
//
// One draproxy per node, as a DaemonSet, with the node's name from the
// downward API, the socket's directory on the host, its health on a pod
// port, and restricted defaults (non-root, read-only root file system, no
// privilege escalation, no capabilities, RuntimeDefault seccomp, requests
// and limits); an init container with CAP_CHOWN alone hands the hostPath
// directory, which the kubelet creates for root, to draproxy's user:
//
//	apiVersion: apps/v1
//	kind: DaemonSet
//	metadata: {name: draproxy, namespace: dra-system}
//	spec:
//	  template:
//	    spec:
//	      serviceAccountName: draproxy
//	      automountServiceAccountToken: false  # draproxy's container mounts its own (kube-api-access)
//	      securityContext: {runAsNonRoot: true, runAsUser: 65532, supplementalGroups: [2000], seccompProfile: {type: RuntimeDefault}}
//	      containers:
//	      - name: draproxy
//	        image: reviewauth/draproxy
//	        args: [--node-name=$(NODE_NAME), --audience=draproxy, --socket=/var/run/draproxy/draproxy.sock,
//	               --socket-group=2000, --driver=gpu.example.com=gpu-driver/kubelet-plugin, --metrics-listen=$(POD_IP):9090]
//	        env:
//	        - name: NODE_NAME
//	          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
//	        readinessProbe: {httpGet: {path: /readyz, port: 9090}}
//	        livenessProbe: {httpGet: {path: /livez, port: 9090}}
//	        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
//	        volumeMounts: [{name: socket, mountPath: /var/run/draproxy}, {name: kube-api-access, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}]
//	      volumes:
//	      - name: socket
//	        hostPath: {path: /var/run/draproxy, type: DirectoryOrCreate}
//	      - name: kube-api-access  # token, ca.crt, namespace, as the kubelet would mount them
//
// The driver's DaemonSet (deploy/driver/daemonset.yaml) runs in group
// 2000, mounts no API-server token, the same hostPath and a projected
// token for draproxy's audience (the kubelet binds it to the pod, hence to
// the node):
//
//	automountServiceAccountToken: false
//	volumes:
//	- name: draproxy
//	  hostPath: {path: /var/run/draproxy, type: Directory}
//	- name: draproxy-token
//	  projected:
//	    sources:
//	    - serviceAccountToken: {audience: draproxy, expirationSeconds: 3600, path: token}
//
// # RBAC
//
// The driver keeps the RBAC its chart grants (deploy/driver/rbac.yaml:
// resourceslices get, list, watch, create, update, patch, delete,
// deletecollection; resourceclaims get; resourceclaims/status update,
// patch; nodes get; and, since Kubernetes 1.37, resourceclaims/driver
// associated-node:update and associated-node:patch with resourceNames
// [DRIVER_NAME] to write a claim's status.devices): draproxy asks for it
// in a SubjectAccessReview, and the API server checks it again on the
// impersonated request. Because draproxy impersonates the node-name
// extra, the API server's own node-association checks (the associated-node
// verbs) and the admission policy work through it as they do for a direct
// call. draproxy's own ServiceAccount needs (deploy/rbac.yaml, and
// deploy/driver/draproxy-rbac.yaml per driver):
//
//	# Reviews: create tokenreviews and subjectaccessreviews.
//	kind: ClusterRoleBinding  # roleRef: ClusterRole system:auth-delegator
//	---
//	# Per driver: impersonating its ServiceAccount, a Role in the driver's namespace...
//	kind: Role
//	metadata: {name: draproxy-impersonate, namespace: DRIVER_NS}
//	rules:
//	- apiGroups: [""]
//	  resources: [serviceaccounts]
//	  verbs: [impersonate]
//	  resourceNames: [DRIVER_SA]
//	---
//	# ...and its namespace's group, a ClusterRole.
//	kind: ClusterRole
//	rules:
//	- apiGroups: [""]
//	  resources: [groups]
//	  verbs: [impersonate]
//	  resourceNames: ["system:serviceaccounts:DRIVER_NS"]
//	---
//	kind: ClusterRole
//	metadata: {name: draproxy}
//	rules:
//	- apiGroups: [""]
//	  resources: [groups]
//	  verbs: [impersonate]
//	  resourceNames: ["system:serviceaccounts"]
//	- apiGroups: [authentication.k8s.io]
//	  resources: [uids]
//	  verbs: [impersonate]  # optional narrowing: resourceNames [DRIVER_SA_UID...]; a UID changes if its ServiceAccount is re-created
//	- apiGroups: [authentication.k8s.io]
//	  resources:
//	  - userextras/authentication.kubernetes.io/node-name
//	  - userextras/authentication.kubernetes.io/node-uid
//	  - userextras/authentication.kubernetes.io/pod-name
//	  - userextras/authentication.kubernetes.io/pod-uid
//	  - userextras/authentication.kubernetes.io/credential-id
//	  verbs: [impersonate]
//	# Its own checks: a slice as it is now before each write, a claim's
//	# reservations, the reserving pods' nodes.
//	- apiGroups: [resource.k8s.io]
//	  resources: [resourceslices, resourceclaims]
//	  verbs: [get]
//	- apiGroups: [""]
//	  resources: [pods]
//	  verbs: [get]
//	# The admission policy and its binding, checked at start and periodically.
//	- apiGroups: [admissionregistration.k8s.io]
//	  resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
//	  verbs: [get]
//	  resourceNames: [draproxy-resourceslices]
//	---
//	# The policy's parameters.
//	kind: Role
//	metadata: {name: draproxy-admission-parameters, namespace: dra-system}
//	rules:
//	- apiGroups: [""]
//	  resources: [configmaps]
//	  verbs: [get, list]
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
// # Limits
//
// A request body is read whole, at most --max-request-body-bytes (3 MiB;
// more is 413); an object draproxy reads, at most 4 MiB. A pod's node is
// remembered for --pod-cache-ttl (1m, keyed by the pod's UID; at most 4096
// pods); nothing else is. Token and SubjectAccessReview caches are
// reviewauth's (--authentication-*, --authorization-* flags).
// --slice-cache-ttl is deprecated and has no effect.
//
// Usage:
//
//	draproxy --node-name=NODE --audience=AUDIENCE --driver=NAME=NAMESPACE/SERVICEACCOUNT... [--kubeconfig=PATH] \
//	    [--socket=/var/run/draproxy/draproxy.sock] [--socket-group=GID] \
//	    [--tls-listen=127.0.0.1:PORT [--tls-cert-file=PATH --tls-private-key-file=PATH | --self-signed-ca-file=PATH]] \
//	    [--require-admission-policy=true] [--admission-policy=NAME] [--admission-policy-binding=NAME] \
//	    [--admission-policy-check-interval=1m] [--request-timeout=1m] \
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
	c.flags.AddFlags(fs, true)                                // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --node-name, --authentication-*, --authorization-*, --tls-* (for --tls-listen), --self-signed-ca-file
	c.flags.AddRevocationFlags(fs, cli.NodeAgentRevocation()) // --revocation-*: this node's pods and Node, as the node
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
	serverOpts := serving.ServerOptions{MaxConnections: c.flags.MaxConnections, CancelOnShutdown: true, Health: started.Health, Metrics: started.Built.Metrics}
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
