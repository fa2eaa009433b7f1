// Package revocation makes a revoked token or permission stop working
// within seconds instead of at the end of a cache TTL.
//
// A [Revoker] watches what tokens are bound to and what authorization
// decisions rest on, and tells the caches at once:
//
//   - [Pods]: this node's pods (a metadata-only watch with the field
//     selector spec.nodeName=NODE, as the kubelet watches them). When a pod
//     is deleted, the cached identities of the tokens bound to it are
//     revoked ([IdentityRevoker]: the identities whose
//     authentication.kubernetes.io/pod-uid is the pod's UID).
//   - [Node]: this node's Node object (metadata.name=NODE). When it is
//     deleted, identities bound to its UID are revoked (node-bound tokens,
//     and pod-bound tokens whose node-uid extra names it).
//   - [ServiceAccounts]: ServiceAccounts (metadata only), in every
//     namespace or in those of [Options].Namespaces. When one is deleted,
//     identities whose UID is its UID are revoked.
//   - [ClusterRoles]: ClusterRoles and ClusterRoleBindings. [Roles]: Roles
//     and RoleBindings, in every namespace or in those of
//     [Options].Namespaces. A change (create, update of what RBAC reads,
//     delete) flushes the cached decisions of the users it can affect
//     ([DecisionForgetter].ForgetUser: the users and service accounts its
//     bindings name), or all of them (ForgetAll: a group subject, many
//     users, a relist). A second flush follows [Options].SecondFlush later:
//     a decision asked for between our flush and the moment the API
//     server's own RBAC authorizer sees the change would otherwise be
//     cached with the old answer for a whole TTL.
//
// An object is deleted for the revoker when the API server says so (a
// delete event, a relist that no longer holds it, or the same name with
// another UID), or [DeletionLeeway] after its deletionTimestamp, the rule
// by which the API server itself starts refusing the tokens bound to an
// object that is being deleted: a terminating pod keeps its token, as it
// does at the API server.
//
// # Never worse than no revoker
//
// The revoker only ever removes cache entries: it never extends a TTL and
// never allows anything. While it is not in sync ([Revoker.Synced] is false,
// reviewauth_revocation_synced is 0: before its first list, after a watch
// error until it has listed again or a bookmark shows it caught up, or
// when a watch has delivered nothing, not even the API server's
// once-a-minute bookmark, for [Options].StallTimeout), the caches' TTLs
// bound how long a revoked token or permission works, as without it.
// After a relist it revokes every object that disappeared and flushes
// every decision, since it may have missed changes. What it cannot see is
// an object created and deleted entirely while it was out of sync: those
// tokens live out their TTL.
//
// # Cost
//
// Each watched resource is one watch (and one list at start and after each
// error) on the API server. Pods and Node are filtered by the API server's
// watch cache to this node's objects: a node agent receives the events of
// its own pods, as the kubelet does. ServiceAccounts, Roles and bindings
// are cluster-wide (or per namespace) and reach every watcher: cheap for
// one replica of a cluster-wide service, measured for a fleet of node
// agents in docs/fleet.md.
//
// No goroutine runs outside [Revoker.Run]: it starts the watches and its
// own timer loop, and stops and waits for all of them before it returns.
// Time comes from [Options].Clock.
package revocation
