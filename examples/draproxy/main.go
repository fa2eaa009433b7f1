// Command draproxy is a node-local proxy to the Kubernetes API server that
// confines DRA (Dynamic Resource Allocation) drivers to their own node,
// reads included, and acts as that node: a compromised node stays one
// node.
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
//	                get                            the API server's answer (to the node), passed on only if bound to NODE
//	                create, apply                  the body: spec.nodeName NODE, no other node binding, spec.driver the caller's
//	                update, patch, delete          the slice as it is now (read for the request): bound to NODE and of the
//	                                               caller's driver; forwarded with its UID as a precondition (and the body checked)
//	ResourceClaims  get                            the API server's answer to the node, passed on only if reserved
//	                                               (status.reservedFor) for a pod the node reads as bound to NODE
//	                list, watch; status            refused
//	Nodes           get                            only NODE itself (the slice controller reads it when not given the node's UID)
//	anything else                                  refused, unless named by --allow
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
// # As the node
//
// draproxy forwards every request it allows, and makes every read of its
// own checks, as its node, system:node:NODE: its token is its pod's
// projected ServiceAccount token, which the API server binds to the pod
// and so to the node, and the API server's constrained impersonation
// (KEP-5284, beta and on by default since Kubernetes 1.36), in its
// associated-node mode, lets a ServiceAccount so bound impersonate that
// node and no other, for the verbs and resources its RBAC names
// (impersonate:associated-node on nodes, impersonate-on:associated-node:VERB
// on each resource; deploy/rbac.yaml). draproxy holds no legacy impersonate
// verb, and reads nothing with its own credentials but the RBAC its
// revoker watches (Revocation, below). The API server gives the node user its
// groups (system:nodes) and nothing else, and then applies the code that
// holds a kubelet to its node: the Node authorizer (a node gets, updates,
// patches and deletes a ResourceSlice only along its graph's edge from the
// slice to the node, lists, watches and deletes collections of them only
// with spec.nodeName=NODE, gets a claim only through a pod bound to it that
// references the claim, and a pod only if bound to it) and the
// NodeRestriction admission plugin (a node creates and deletes only
// slices whose spec.nodeName is its own). Whoever steals draproxy's token
// from node A (root on A, a privileged pod there) gets node A's DRA
// objects and nothing else: TestDRAProxyStolenToken (test/e2e) tries the
// rest on a real API server. The node identity may write any driver's
// slices of its node: draproxy's binding of driver names to identities
// (--driver) is what separates the drivers of one node.
//
// At start draproxy asks the API server who it is (a SelfSubjectReview)
// and refuses to start, saying why, unless it is a ServiceAccount whose
// token carries the node-name extra of --node-name (a Secret token, a
// token bound to no pod, or a pod elsewhere cannot act as this node), and
// whether its RBAC lets it act as the node for every request it forwards
// (SelfSubjectAccessReviews); a refusal names the missing verb.
//
// draproxy's own credentials stay for what is not a node's: the reviews
// of the drivers' tokens and requests (TokenReview, SubjectAccessReview:
// system:auth-delegator), its own SelfSubjectReview and
// SelfSubjectAccessReviews at start, the revoker's list and watch of
// ClusterRoles, Roles and their bindings (deploy/revocation-rbac.yaml: a
// node may not read RBAC), and, with --require-admission-policy, the list
// of the admission policies and their bindings
// (deploy/admission-policy-check.yaml). Whoever may create pods (or tokens
// bound to pods) for draproxy's ServiceAccount can place one on any node
// and act as that node's DRA objects: draproxy's namespace is as sensitive
// as the nodes, and nothing draproxy ships grants that.
//
// # The audit log still names the driver
//
// The API server's audit event of a forwarded request shows user
// draproxy's ServiceAccount (with its pod and node extras) and
// impersonatedUser system:node:NODE. draproxy puts the driver where an
// auditor finds it: the forwarded User-Agent, which the event records as
// userAgent, is
//
//	draproxy/NODE (driver=system:serviceaccount:NS:SA; pod=NS/POD; pod-uid=UID) DRIVER-USER-AGENT
//
// (draproxy's part first, so a driver cannot write what comes before),
// and every forwarded write (create, update, patch, delete,
// deletecollection) is one structured log line, at any verbosity:
//
//	"draproxy: forwarded a write as the node" driver="system:serviceaccount:NS:SA" pod="NS/POD" podUID="..."
//	    verb="update" resource="resourceslices" name="..." uidPrecondition="..." status=200 auditID="..." node="NODE"
//
// whose auditID is the Audit-ID the API server answered with: the
// auditID of the request's event. No token or body is logged. Joining
// them: the event with that auditID, or (from the audit log alone) the
// events whose impersonatedUser is system:node:NODE and whose userAgent
// starts with draproxy/NODE. draproxy's own reads carry the User-Agent
// "draproxy/NODE (own check)".
//
// # Nothing remembered, names are not objects
//
// A ResourceSlice's spec.nodeName is immutable, but its name is not an
// object: a slice can be deleted (by a deletecollection, by another actor)
// and a slice of the same name created for another node. So draproxy never
// lets a decision rest on what it once saw, and the Node authorizer's
// graph, which the API server updates a moment after each change, is
// not the only line either. A get is a checked read: draproxy asks the API
// server (as the node) for the slice as JSON (whatever the driver's
// Accept; client-go decodes an answer by its Content-Type), reads the
// whole answer, checks that it is that slice (kind, apiVersion, name,
// UID) and that it is bound to this node alone (spec.nodeName, no
// allNodes, nodeSelector or perDeviceNodeSelection), and only then passes
// it on; a slice of another node and a missing one (to the node, both the
// API server's 403) are the API server's 404 to the driver, with a message
// saying why, so a driver learns nothing about other nodes' slices. A get
// asking for a Table or PartialObjectMetadata (Accept: ...;as=...), which
// carry no spec, is 406. An update, patch or delete reads the slice as it
// is now (a list, as the node, with metadata.name=NAME,spec.nodeName=NODE,
// which does not depend on the graph), and carries its UID as a
// precondition the API server enforces (metadata.uid in an update, a
// merge, strategic merge or apply patch; a leading test of /metadata/uid
// in a JSON patch; preconditions.uid in DeleteOptions, the options of a
// delete without a body moved into one): whatever happens to the name
// between draproxy's read and the write, the write applies to the slice
// draproxy checked or to nothing (409). The UID is the only precondition
// draproxy adds, so a driver's unconditional patch does not start failing
// on every concurrent change; a UID the driver set itself is kept when it
// is the slice's (the upstream ResourceSlice controller deletes with one)
// and refused (409) when it is not. Anything that can create, a create or
// a server-side apply (which creates a missing name; the Node authorizer
// lets a node apply only to a slice of its own), is checked on its body
// exactly as a create is; an apply to an existing slice is checked both
// ways. The bodies of a patch are checked too: a merge or strategic merge
// patch may set spec.nodeName only to this node and spec.driver only to
// the caller's, and neither remove spec nor carry $patch or $retainKeys; a
// JSON patch may not write what binds a slice (the API server keeps
// nodeName and driver immutable anyway). Every object draproxy reads, for
// a decision or to pass on, is checked to be the one asked for, whole: an
// empty object, a Status or another object answered with 200, a truncated
// answer, an answer that is not JSON are "could not check" (503), never a
// refusal, never remembered.
//
// Claims by the API server's graph: a claim is passed on only if the API
// server returns it to the node (the Node authorizer follows the live
// pods bound to the node that reference it), and, as the second line, only
// if it is reserved for a pod, by name and UID, that the node reads now as
// bound to it. No cache decides a read: a pod deleted on this node and
// re-created under the same name on another, with the claim reserved for
// both UIDs, gets this node's driver a refusal (TestClaimPodMoved; on a
// real API server, TestDRAProxy in test/e2e). Nothing about objects is cached at all (the
// deprecated --pod-cache-ttl and --slice-cache-ttl have no effect); what
// is cached is reviewauth's: the reviews of the drivers' tokens and of
// their requests (--authentication-*, --authorization-*), which the
// revoker ends early.
//
// # Revocation
//
// draproxy forwards as its node, so the API server checks the node's
// permissions on what it forwards, never the driver's: the driver's RBAC
// is checked by draproxy's own SubjectAccessReviews alone, whose Allow is
// cached for a minute (--authorization-webhook-cache-authorized-ttl), as
// the review of a driver's token is (--authentication-token-webhook-cache-ttl).
// A revoker (package revocation: --revocation-watch, default
// pods,node,clusterroles,roles; --revocation-as-node, default true) ends
// both within seconds instead. It watches this node's pods and its Node,
// read as the node: a deleted driver pod's token is refused at once. And
// it watches ClusterRoles, Roles and their bindings, read with draproxy's
// own credentials (a node may not read RBAC): a binding deleted or no
// longer naming the driver, or a role losing a rule, flushes the driver's
// cached decisions at once and again a second later. ClusterRoles because
// ResourceSlices and Nodes are cluster-scoped, which only
// ClusterRoleBindings grant; Roles because claims are namespaced, and a
// RoleBinding in a claim's namespace grants its get. Its RBAC is
// deploy/revocation-rbac.yaml; without it draproxy works, and the revoker
// stays out of sync (reviewauth_revocation_synced 0): the TTLs apply. On a
// real API server TestRevocation (test/e2e) measures a deleted pod's token
// and a deleted ClusterRoleBinding and RoleBinding of a driver refused
// within 2 s. Watching RBAC costs each node the cluster's RBAC objects at
// a start and every change of them (docs/fleet.md); with
// --revocation-watch=pods,node and without the RBAC rules draproxy reads
// nothing of its own, and a removed permission works through it for up to
// the Allow TTL.
//
// # Driver names
//
// --driver=NAME=NAMESPACE/SERVICEACCOUNT (repeatable, at least one) binds
// each DRA driver name to the ServiceAccounts that may publish it: a
// ResourceSlice whose spec.driver is not bound to the caller is refused on
// create and on every write, and a deletecollection must select one of the
// caller's drivers (spec.driver=NAME). A second driver identity on the same
// node cannot touch another's slices, although the node identity, which
// draproxy writes as, could. The admission policy below binds the same
// names to the same identities.
//
// # Two modes, and the admission policy
//
// Through draproxy (the first mode), a driver mounts no API token: it
// reaches the API server only as its node, through draproxy's checks. A
// driver may instead write with its own pod-bound API token (the second
// mode; the alternative the drivers' charts ship today, and the only way
// for a driver to write a claim's status.devices, which a node may not).
// Then the API server's own check confines it: each driver part ships a
// ValidatingAdmissionPolicy and its binding
// (deploy/driver/admission-policy.yaml, one per driver, its values written
// into it by kustomize: no parameter object anyone can edit) that refuse a
// ResourceSlice create, update or delete by any ServiceAccount of the
// driver's namespace but those it exempts (central controllers that
// publish allNodes slices) unless the new object (and, for an update or a
// delete, the old one) has spec.nodeName equal to the node in the
// writer's authentication.kubernetes.io/node-name extra and no other node
// binding; the part's own ServiceAccount must write its driver names, and
// the namespace's other ServiceAccounts none of them. Users outside the
// namespace (the kubelet, draproxy's node writes, central controllers
// elsewhere) are not matched. The node-name extra is in every token bound
// to a pod on a node (GA since Kubernetes 1.32); a confined identity's
// token without it (a Secret token, a token bound to no pod) can write no
// ResourceSlice at all.
//
// draproxy's own mode does not depend on the policy. With
// --require-admission-policy (off by default) draproxy checks, at start
// and then every --admission-policy-check-interval (1m), that each
// --driver identity is confined by a copy of the shipped policy (the same
// matchConstraints, failurePolicy Fail, no matchConditions, the same
// expressions; naming the identity's namespace and ServiceAccount, with
// exactly its --driver names, not exempting it; kube-controller-manager's
// type checking, when it has run, found nothing) bound with Deny and not
// narrowed; missing, changed or unreadable, it says so in an error log
// line and in the metric draproxy_admission_policy_verified (0), and at
// start it is an error. That check lists the policies and bindings with
// draproxy's own credentials (deploy/admission-policy-check.yaml, not
// applied by default).
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
// --socket-group) in a hostPath directory shared with the driver pods,
// serving HTTP/1.1 and HTTP/2 without TLS (h2c), and optionally on a
// loopback TLS port (--tls-listen, HTTP/2 and HTTP/1.1) for drivers on the
// host network. The socket belongs to draproxy: its directory must be
// draproxy's alone (owned by its user, writable by no one else; the
// drivers mount it read-only and run as users of their own, since
// connecting needs no write access to the directory), or draproxy refuses
// to start; a driver that could write there could replace the socket with
// its own and collect other drivers' tokens. What is at --socket already
// is replaced only if it is a socket no one serves (a connection is
// refused); a live socket or anything else is an error naming it.
// --chown-socket-dir=UID:GID, run once as root with CAP_CHOWN alone (the
// DaemonSet's init container, draproxy's own image), makes the hostPath
// directory the kubelet created draproxy's (mode 0755) and exits. A driver
// points unmodified client-go at the socket:
//
//	cfg := &rest.Config{
//		Host:            "http://localhost",
//		BearerTokenFile: "/var/run/secrets/draproxy/token", // projected, draproxy's audience
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
// kustomization.yaml says what to edit: namespace, image, --driver), and
// deploy/driver/ one DRA driver's part, applied once per driver (kubectl
// apply -k examples/draproxy/deploy/driver after replacing its namespace,
// gpu-driver, and its values.yaml, and the example kubelet plugin):
//
//	deploy/namespace.yaml                dra-system, Pod Security "privileged" enforced (the socket's hostPath), "restricted" warned and audited
//	deploy/serviceaccount.yaml           draproxy's ServiceAccount
//	deploy/rbac.yaml                     draproxy's own RBAC (below)
//	deploy/revocation-rbac.yaml          the revoker's reads (Revocation, above)
//	deploy/daemonset.yaml                draproxy on every node
//	deploy/admission-policy-check.yaml   the RBAC of --require-admission-policy (not applied by default)
//	deploy/driver/namespace.yaml         the driver's namespace, Pod Security as draproxy's
//	deploy/driver/serviceaccount.yaml    the kubelet plugin's ServiceAccount
//	deploy/driver/rbac.yaml              the driver's RBAC (below)
//	deploy/driver/admission-policy.yaml  the policy and binding confining the ServiceAccounts of the driver's namespace
//	deploy/driver/daemonset.yaml         the kubelet plugin: the socket's directory (read-only), its group, its own user, a token for draproxy
//	deploy/driver/values.yaml            what to edit: driver names, exemptions, draproxy's audience (never applied)
//
// One draproxy per node, as a DaemonSet, with the node's name from the
// downward API, its audience from its namespace and name
// (draproxy.reviewauth.io/NAMESPACE/NAME, which drivers' tokens ask for),
// the socket's directory on the host, its health on a pod port, and
// restricted defaults (non-root, read-only root file system, no privilege
// escalation, no capabilities, RuntimeDefault seccomp, requests and
// limits); an init container of its own image, as root with CAP_CHOWN
// alone, hands the hostPath directory to draproxy's user:
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
//	      initContainers:
//	      - name: socket-dir
//	        image: reviewauth/draproxy
//	        args: [--chown-socket-dir=65532:65532, --socket=/var/run/draproxy/draproxy.sock]
//	        securityContext: {runAsUser: 0, capabilities: {drop: [ALL], add: [CHOWN]}, ...}
//	      containers:
//	      - name: draproxy
//	        image: reviewauth/draproxy
//	        args: [--node-name=$(NODE_NAME), --audience=draproxy.reviewauth.io/dra-system/draproxy,
//	               --socket=/var/run/draproxy/draproxy.sock, --socket-group=2000,
//	               --driver=gpu.example.com=gpu-driver/kubelet-plugin, --metrics-listen=$(POD_IP):9090]
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
// The driver's DaemonSet (deploy/driver/daemonset.yaml) runs as a user of
// its own (65533) in group 2000, mounts no API-server token, the same
// hostPath read-only and a projected token for draproxy's audience (the
// kubelet binds it to the pod, hence to the node):
//
//	automountServiceAccountToken: false
//	securityContext: {runAsUser: 65533, supplementalGroups: [2000], ...}
//	volumeMounts: [{name: draproxy, mountPath: /var/run/draproxy, readOnly: true}, ...]
//	volumes:
//	- name: draproxy
//	  hostPath: {path: /var/run/draproxy, type: Directory}
//	- name: draproxy-token
//	  projected:
//	    sources:
//	    - serviceAccountToken: {audience: draproxy.reviewauth.io/dra-system/draproxy, expirationSeconds: 3600, path: token}
//
// # RBAC
//
// The driver keeps the RBAC its chart grants (deploy/driver/rbac.yaml:
// resourceslices get, list, watch, create, update, patch, delete,
// deletecollection; resourceclaims get; nodes get; and, for the second
// mode, resourceclaims/status update, patch and, since Kubernetes 1.37,
// resourceclaims/driver associated-node:update and associated-node:patch
// with resourceNames [DRIVER_NAME] to write a claim's status.devices):
// draproxy asks for it in a SubjectAccessReview as the driver, its second
// line. draproxy's own ServiceAccount needs (deploy/rbac.yaml), whatever
// the drivers, and holds no impersonate verb:
//
//	# Reviews: create tokenreviews and subjectaccessreviews.
//	kind: ClusterRoleBinding  # roleRef: ClusterRole system:auth-delegator
//	---
//	# Acting as its node (the API server allows only the node of its pod).
//	kind: ClusterRole
//	metadata: {name: draproxy}
//	rules:
//	- apiGroups: [authentication.k8s.io]
//	  resources: [nodes]
//	  verbs: ["impersonate:associated-node"]
//	- apiGroups: [resource.k8s.io]
//	  resources: [resourceslices]
//	  verbs: ["impersonate-on:associated-node:get", "impersonate-on:associated-node:list", "impersonate-on:associated-node:watch",
//	          "impersonate-on:associated-node:create", "impersonate-on:associated-node:update", "impersonate-on:associated-node:patch",
//	          "impersonate-on:associated-node:delete", "impersonate-on:associated-node:deletecollection"]
//	- apiGroups: [resource.k8s.io]
//	  resources: [resourceclaims]
//	  verbs: ["impersonate-on:associated-node:get"]
//	- apiGroups: [""]
//	  resources: [pods, nodes]            # the pods a claim is reserved for; the driver's Node
//	  verbs: ["impersonate-on:associated-node:get"]
//
// and, for its revoker (deploy/revocation-rbac.yaml), acting as its node to
// list and watch pods and nodes (the Node authorizer gives it its own
// alone), and list and watch of clusterroles, clusterrolebindings, roles
// and rolebindings on its own identity.
//
// An --allow entry is forwarded as the node too: draproxy's RBAC must grant
// impersonate-on:associated-node:VERB on it, and the node must be allowed
// it (the Node authorizer), or draproxy refuses to start.
//
// Migrating from the manifests that impersonated the drivers (draproxy
// before issue #28): delete what is gone, then apply deploy/ and each
// driver part again. Gone: the ClusterRole draproxy's legacy impersonate
// rules (groups, uids, userextras), draproxy's get of resourceslices,
// resourceclaims and pods, the Role draproxy-admission-parameters (get,
// list configmaps), each driver part's draproxy-rbac.yaml (Role
// draproxy-impersonate in the driver's namespace, ClusterRole and
// ClusterRoleBinding draproxy-impersonate-DRIVER_NS), each part's
// parameter ConfigMap draproxy-driver-identity in draproxy's namespace,
// and the cluster-wide policy and binding draproxy-resourceslices with
// paramKind ConfigMap (each driver part now ships its own, without
// parameters):
//
//	kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy draproxy-resourceslices
//	kubectl -n dra-system delete configmap -l draproxy.reviewauth.io/driver-identity
//	kubectl -n dra-system delete role,rolebinding draproxy-admission-parameters
//	kubectl -n DRIVER_NS delete role,rolebinding draproxy-impersonate
//	kubectl delete clusterrole,clusterrolebinding draproxy-impersonate-DRIVER_NS
//
// (kubectl apply replaces the ClusterRole draproxy with the new rules.)
// draproxy's --audience changes from draproxy to
// draproxy.reviewauth.io/NAMESPACE/NAME: the drivers' DaemonSets ask for
// the new one (values.yaml). --require-admission-policy is off by default
// now (it was on); --admission-policy, --admission-policy-binding and
// --pod-cache-ttl have no effect. A driver that wrote a claim's status
// through draproxy writes it with its own pod-bound token (the second
// mode). The cluster must serve constrained impersonation (Kubernetes
// 1.36 or later, ConstrainedImpersonation on) and run the Node authorizer
// and NodeRestriction, as kubeadm clusters do.
//
// # Limits
//
// A request body is read whole, at most --max-request-body-bytes (3 MiB;
// more is 413); an object draproxy reads, at most 4 MiB. Nothing about
// objects is remembered. Token and SubjectAccessReview caches are
// reviewauth's (--authentication-*, --authorization-* flags).
//
// Usage:
//
//	draproxy --node-name=NODE --audience=AUDIENCE --driver=NAME=NAMESPACE/SERVICEACCOUNT... [--kubeconfig=PATH] \
//	    [--socket=/var/run/draproxy/draproxy.sock] [--socket-group=GID] \
//	    [--tls-listen=127.0.0.1:PORT [--tls-cert-file=PATH --tls-private-key-file=PATH | --self-signed-ca-file=PATH]] \
//	    [--require-admission-policy] [--admission-policy-check-interval=1m] [--request-timeout=1m] \
//	    [--allow=VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE] ...]
//	draproxy --chown-socket-dir=UID:GID [--socket=/var/run/draproxy/draproxy.sock]
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
	"path/filepath"
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
	chownSocketDir    string
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
	fs.StringVar(&c.socket, "socket", "/var/run/draproxy/draproxy.sock", "Unix socket to serve on (mode 0660), in a directory that must be draproxy's alone (owned by its user, writable by no one else), shared read-only with driver pods; empty for none")
	fs.IntVar(&c.socketGroup, "socket-group", -1, "group ID to give the socket; -1 keeps the process's group")
	fs.StringVar(&c.chownSocketDir, "chown-socket-dir", "", "UID:GID: make the directory of --socket owned by UID:GID with mode 0755, then exit (run once as root with CAP_CHOWN, as an init container, before draproxy runs as UID)")
	fs.StringVar(&c.tlsListen, "tls-listen", "", "loopback address to serve TLS on, such as 127.0.0.1:8443; empty for none")
	fs.StringVar(&c.nodeUID, "node-uid", "", "UID of this node; when set, drivers' tokens must carry it too (node-uid extra)")
	fs.StringArrayVar(&c.allow, "allow", nil, "VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE] to forward, as the node, under the driver's RBAC alone, such as get:runtimeclasses.node.k8s.io (repeatable; draproxy's RBAC must let it act as the node for it)")
	fs.StringArrayVar(&c.driver, "driver", nil, "NAME=NAMESPACE/SERVICEACCOUNT: the DRA driver name NAME may be published (spec.driver of the ResourceSlices written) by that ServiceAccount only, such as gpu.example.com=gpu-driver/kubelet-plugin (repeatable; at least one)")
	fs.BoolVar(&c.requireAdmission, "require-admission-policy", false, "refuse to start unless a ValidatingAdmissionPolicy of deploy/driver/admission-policy.yaml, bound with Deny, confines each --driver identity with the same driver names, and check it every --admission-policy-check-interval (needs deploy/admission-policy-check.yaml's RBAC); draproxy's own confinement does not depend on it")
	fs.StringVar(&c.admissionPolicy, "admission-policy", "", "no effect: each driver part ships a policy of its own, which --require-admission-policy finds")
	_ = fs.MarkDeprecated("admission-policy", "each driver part ships a policy of its own; the flag has no effect")
	fs.StringVar(&c.admissionBinding, "admission-policy-binding", "", "no effect: each driver part ships a binding of its own")
	_ = fs.MarkDeprecated("admission-policy-binding", "each driver part ships a binding of its own; the flag has no effect")
	fs.DurationVar(&c.admissionInterval, "admission-policy-check-interval", DefaultAdmissionCheckInterval, "with --require-admission-policy, how often to check, after the start, that the admission policies are still in place")
	fs.DurationVar(&c.requestTimeout, "request-timeout", DefaultRequestTimeout, "deadline of every forwarded request but watches, as the API server's own --request-timeout: 504 with Retry-After past it")
	fs.DurationVar(&c.sliceTTL, "slice-cache-ttl", 0, "no effect: draproxy reads a ResourceSlice on every request that needs it")
	_ = fs.MarkDeprecated("slice-cache-ttl", "draproxy no longer remembers ResourceSlices; the flag has no effect")
	fs.DurationVar(&c.podTTL, "pod-cache-ttl", 0, "no effect: draproxy reads the pods a claim is reserved for, as the node, on every read of the claim")
	_ = fs.MarkDeprecated("pod-cache-ttl", "draproxy no longer remembers pods: claims are decided by the API server's graph and a read of the pods as the node; the flag has no effect")
	fs.Int64Var(&c.maxBody, "max-request-body-bytes", DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	c.flags.AddFlags(fs, true) // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --node-name, --authentication-*, --authorization-*, --tls-* (for --tls-listen), --self-signed-ca-file
	// --revocation-*: this node's pods and Node (as the node), and the RBAC
	// the drivers' SubjectAccessReviews rest on: ResourceSlices and Nodes
	// are cluster-scoped (ClusterRoleBindings alone grant them), claims
	// namespaced (RoleBindings too). draproxy forwards as its node, so the
	// API server never checks a driver's RBAC again: a removed binding
	// ends through draproxy only when its cached decision does.
	c.flags.AddRevocationFlags(fs, cli.NodeAgentRevocation("clusterroles", "roles"))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.flags.Version {
		return c, nil
	}
	if c.chownSocketDir != "" {
		if _, _, err := parseOwner(c.chownSocketDir); err != nil {
			return nil, fmt.Errorf("draproxy: %w", err)
		}
		if c.socket == "" {
			return nil, errors.New("draproxy: --chown-socket-dir needs --socket")
		}
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

// ownObjects is what draproxy reads and asks with its own credentials
// (the API server's configuration up): its self-check at start, and the
// admission policy check.
func ownObjects(up *rest.Config) (*objects, error) {
	host, _, err := rest.DefaultServerUrlFor(up)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's URL: %w", err)
	}
	base, err := rest.TransportFor(up)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's transport: %w", err)
	}
	return newObjects(&http.Client{Transport: base}, host, nodeImpersonation{}), nil
}

// upstreamConfig is the API server with draproxy's own credentials: the
// kubeconfig at path, or the in-cluster configuration.
func upstreamConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// run parses args and serves until ctx is done, then shuts down: the
// listeners close, in-flight requests (watches included) are cancelled,
// and the socket is removed.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if c.chownSocketDir != "" && !c.flags.Version {
		uid, gid, _ := parseOwner(c.chownSocketDir)
		dir := filepath.Dir(c.socket)
		if err := prepareSocketDir(dir, uid, gid); err != nil {
			return fmt.Errorf("draproxy: %w", err)
		}
		_, err := fmt.Fprintf(stdout, "socket directory %s owned by %d:%d, mode 0755\n", dir, uid, gid)
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
	node := c.review.Authz.NodeName
	handler, err := newProxy(options{
		NodeName:       node,
		NodeUID:        c.nodeUID,
		Drivers:        c.drivers,
		Authenticator:  built.Authenticator,
		SAR:            built.SAR,
		Upstream:       up,
		Allow:          c.rules,
		RequestTimeout: c.requestTimeout,
		MaxBodyBytes:   c.maxBody,
		Metrics:        built.Metrics,
	})
	if err != nil {
		return err
	}

	// draproxy acts as its node: its own credentials must be a token bound
	// to a pod on this node, and its RBAC must let it act as the node for
	// everything it forwards.
	own, err := ownObjects(up)
	if err != nil {
		return err
	}
	clk := clock.RealClock{}
	checkCtx, stopCheck := withDeadline(ctx, clk, c.requestTimeout)
	err = selfCheck(checkCtx, own, node, append(defaultRules(), c.rules...))
	stopCheck()
	if err != nil {
		return fmt.Errorf("draproxy: cannot act as node %q: %w", node, err)
	}

	// With --require-admission-policy: the API server's own check of the
	// drivers' ResourceSlice writes with their own tokens
	// (deploy/driver/admission-policy.yaml), checked now and then every
	// --admission-policy-check-interval.
	var admission *admissionCheck
	if c.requireAdmission {
		if admission, err = newAdmissionCheck(own, c.drivers); err != nil {
			return err
		}
		if err := built.Registry.Register(admission.Collector()); err != nil {
			return fmt.Errorf("draproxy: %w", err)
		}
		checkCtx, stopCheck := withDeadline(ctx, clk, c.requestTimeout)
		err = admission.check(checkCtx)
		stopCheck()
		admission.log(ctx, err)
		if err != nil {
			return fmt.Errorf("%w (--require-admission-policy)", err)
		}
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
	klog.FromContext(ctx).Info("Serving", "address", listening, "node", node, "actingAs", nodeUserPrefix+node, "audiences", built.Authenticator.Audiences())

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
	// The admission policies, again every interval, until serving ends.
	if admission != nil {
		wg.Go(func() { admission.run(ctx, clk, c.admissionInterval, c.requestTimeout, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("draproxy: %w", err)
	}
	return nil
}
