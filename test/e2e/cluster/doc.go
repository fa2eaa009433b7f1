// Package cluster runs a real etcd and kube-apiserver (pinned by
// build.sh: kube-apiserver v1.37.2, etcd v3.6.16) on 127.0.0.1 for
// end-to-end tests of reviewauth.
//
// A suite package starts one cluster for all its tests:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m, cluster.Options{})) }
//
//	func TestFlow(t *testing.T) {
//		c := cluster.Get(t)
//		ns := c.UniqueNamespace(t, "flow")
//		c.CreateServiceAccount(t, ns, "backup")
//		tok := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{"snap.example"}})
//		st := c.ReviewToken(t, tok, "snap.example") // the API server's own answer
//		...
//	}
//
// The cluster has no controller-manager, scheduler or kubelet: pods never
// run, namespaces are never finalized, and helpers create what controllers
// would (each namespace's "default" ServiceAccount). Authorization is
// Node,RBAC. Credentials: [Cluster.AdminConfig] (token, system:masters),
// [Cluster.UserConfig] (client certificates from [Cluster.ClientCA]),
// [Cluster.TokenConfig] (any bearer token). [Cluster.Stop], [Cluster.Kill]
// and [Cluster.Restart] make API server outages; [Cluster.MetricValue]
// counts what the API server received; [Cluster.AuditEvents] reads its
// audit log (resource.k8s.io requests, and every request of
// [Options.AuditUserGroups]); [Cluster.LogTail] explains
// failures.
package cluster
