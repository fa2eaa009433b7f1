package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// watchModel is what a node agent's revoker (package revocation) watches,
// and how often what it watches changes. Its cost to the API server is
// watches and watch events, which this model counts from the fleet's
// workload (the simulator runs no watch cache); what its flushes cost in
// reviews, the simulator measures with the real caches (the
// reviewauth+revoker configuration).
type watchModel struct {
	// Resources is --revocation-watch: pods, node, clusterroles, roles.
	Resources []string
	// PodsPerNode is every pod on a node (the revoker sees them all, not
	// only its callers); they are replaced at the workload's churn rate.
	PodsPerNode int
	// PodEvents is the events of one pod's life on a spec.nodeName watch:
	// bound to the node (added), the kubelet's status updates (pending,
	// running, ready), the deletionTimestamp, the final status, deleted.
	PodEvents float64
	// NodeEventsPerHour is the updates of a Node object: its status every
	// 5 minutes when nothing changes (nodeStatusReportFrequency; the
	// heartbeat is a Lease, which is not watched).
	NodeEventsPerHour float64
	// RBACObjects is the ClusterRoles and ClusterRoleBindings (with
	// "roles", also Roles and RoleBindings) of the cluster, listed at each
	// start; RBACChangesPerHour the changes to them.
	RBACObjects        int
	RBACChangesPerHour float64
	// Bookmark is how often the API server sends a bookmark on a quiet
	// watch (k8s.io/apiserver's cacher: about once a minute).
	Bookmark time.Duration
}

func defaultWatchModel() watchModel {
	return watchModel{
		Resources:   []string{"pods", "node", "clusterroles"},
		PodsPerNode: 30, PodEvents: 7, NodeEventsPerHour: 12,
		RBACObjects: 500, RBACChangesPerHour: 60, Bookmark: time.Minute,
	}
}

func (w watchModel) validate() error {
	for _, r := range w.Resources {
		if !slices.Contains([]string{"pods", "node", "serviceaccounts", "clusterroles", "roles"}, r) {
			return fmt.Errorf("-revoker-watch: unknown %q", r)
		}
	}
	if w.PodsPerNode < 0 || w.PodEvents < 0 || w.NodeEventsPerHour < 0 || w.RBACObjects < 0 || w.RBACChangesPerHour < 0 || w.Bookmark <= 0 {
		return fmt.Errorf("need non-negative revoker model counts and a positive bookmark interval")
	}
	return nil
}

// watchRow is one watched resource's cost per node.
type watchRow struct {
	what    string
	watches int
	events  float64 // per second, per node, bookmarks apart
	listed  int     // objects listed at a start
	why     string
}

// rows are the watches of the model's resources, for churn (pods replaced
// per hour, a fraction).
func (w watchModel) rows(churn float64) []watchRow {
	var rows []watchRow
	for _, r := range w.Resources {
		switch r {
		case "pods":
			rows = append(rows, watchRow{"pods of the node (spec.nodeName, metadata)", 1, float64(w.PodsPerNode) * churn * w.PodEvents / 3600, w.PodsPerNode,
				fmt.Sprintf("%d pods × %.0f%% replaced per hour × %.0f events", w.PodsPerNode, churn*100, w.PodEvents)})
		case "node":
			rows = append(rows, watchRow{"the node (metadata.name, metadata)", 1, w.NodeEventsPerHour / 3600, 1,
				fmt.Sprintf("%.0f status updates per hour", w.NodeEventsPerHour)})
		case "clusterroles", "roles":
			rows = append(rows, watchRow{r + " and their bindings", 2, w.RBACChangesPerHour / 3600, w.RBACObjects,
				fmt.Sprintf("every RBAC change in the cluster: %.0f per hour", w.RBACChangesPerHour)})
		case "serviceaccounts":
			rows = append(rows, watchRow{"serviceaccounts (metadata)", 1, 0, 0, "not modelled: every ServiceAccount change in the cluster"})
		}
	}
	return rows
}

// writeRevocation prints the revoker's watches per node and for the fleet,
// beside what the simulated configurations cost in reviews: revocation
// within 2 s by a revoker (reviewauth+revoker) or by TTLs alone
// (reviewauth-2s).
func writeRevocation(out io.Writer, p params, results []*result) {
	w := p.Watch
	fmt.Fprintf(out, "\n## Revocation within 2 s: a revoker's watches, or 2 s TTLs\n\n")
	fmt.Fprintf(out, "A revoker (--revocation-watch=%s) per node: its watches and their events (a model: counts from the workload, per node and for %d nodes), with a bookmark on each watch every %v.\n\n",
		strings.Join(w.Resources, ","), p.Nodes, w.Bookmark)
	fmt.Fprintln(out, "| watch | watches per node | events/s per node | fleet events/s | objects listed per node at a start | from |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	var watches, listed int
	var events float64
	for _, r := range w.rows(p.ChurnPerHour) {
		fmt.Fprintf(out, "| %s | %d | %.3g | %.3g | %d | %s |\n", r.what, r.watches, r.events, r.events*float64(p.Nodes), r.listed, r.why)
		watches += r.watches
		listed += r.listed
		events += r.events
	}
	bookmarks := float64(watches) / w.Bookmark.Seconds()
	fmt.Fprintf(out, "| bookmarks | | %.3g | %.3g | | one per watch per %v |\n", bookmarks, bookmarks*float64(p.Nodes), w.Bookmark)
	fmt.Fprintf(out, "| **total** | **%d** | **%.3g** | **%.3g** | **%d** | %d watches, %d objects listed at a cold restart of every agent |\n\n",
		watches, events+bookmarks, (events+bookmarks)*float64(p.Nodes), listed, watches*p.Nodes, listed*p.Nodes)

	byName := make(map[string]*result)
	for _, r := range results {
		byName[r.config.name] = r
	}
	fmt.Fprintln(out, "| revocation | TokenReviews/s per node | SARs/s per node | reviews/s per node | fleet reviews/s | fleet watch events/s | watches |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, row := range []struct{ name, what string }{
		{"reviewauth", "at the TTLs (1 m), no revoker"},
		{"reviewauth+revoker", "within 2 s by a revoker, TTLs 1 m"},
		{"reviewauth-2s", "within 2 s by TTLs of 2 s"},
	} {
		r, ok := byName[row.name]
		if !ok {
			continue
		}
		tr, sar := r.steady()
		ev, ws := "0", "0"
		if r.config.revoker {
			ev, ws = fmt.Sprintf("%.3g", (events+bookmarks)*float64(p.Nodes)), fmt.Sprint(watches*p.Nodes)
		}
		fmt.Fprintf(out, "| %s (%s) | %.3g | %.3g | %.3g | %.0f | %s | %s |\n", row.what, row.name, tr, sar, tr+sar, (tr+sar)*float64(p.Nodes), ev, ws)
	}
	fmt.Fprintf(out, "\nreviewauth+revoker's reviews include the flushes: %.0f RBAC changes per hour that flush every decision of every agent (a group subject, a relist), each twice (the second flush 1 s later); changes naming users flush only theirs and are not counted. A watch event is served from the API server's watch cache, its encoding shared by every watcher of the object; a review is a request through authentication, admission of a create, and a token verification or an RBAC evaluation.\n",
		p.RBACFlushesPerHour)
}
