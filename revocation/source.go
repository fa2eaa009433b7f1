package revocation

import (
	"context"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// handler acts on what a watch delivers. Its methods are called from the
// source's reflector, one at a time.
type handler interface {
	upsert(obj any)
	remove(obj any)
	// replace is a complete list; first is true for the source's first.
	replace(objs []any, first bool)
}

// source is one watched resource in one scope (all namespaces, one
// namespace, or this node's objects): a client-go Reflector that lists and
// watches it into the source itself, a cache.ReflectorStore that hands
// what arrives to its handler and keeps the liveness of the watch.
type source struct {
	r        *Revoker
	name     string // for logs: resource, and the namespace or selector
	resource string // for metrics
	expected runtime.Object
	field    string // field selector of every list and watch
	list     func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch    func(context.Context, metav1.ListOptions) (watch.Interface, error)
	// noWatchList: the client does not support streaming lists
	// (client-go's fakes).
	noWatchList bool
	h           handler

	// Guarded by r.mu.
	listed      bool      // a complete list (or a bookmark) since the last error
	initialized bool      // listed once
	watching    bool      // a watch is being opened or delivering
	lastSeen    time.Time // last list, watch opened, event or bookmark
	gen         int       // watches opened
	stop        func()    // ends the current watch
}

// newSources returns a source for each resource and scope of r's options.
func (r *Revoker) newSources() []*source {
	o := r.opts
	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var out []*source
	meta := func(client metadata.Interface, gvr schema.GroupVersionResource, ns, field, resource string, h handler) *source {
		c := client.Resource(gvr)
		var ri interface {
			List(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
			Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
		} = c
		if ns != "" {
			ri = c.Namespace(ns)
		}
		return &source{
			r: r, name: scoped(gvr.Resource, ns, field), resource: resource, expected: &metav1.PartialObjectMetadata{}, field: field,
			list:        func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, lo) },
			watch:       ri.Watch,
			noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(client),
			h:           h,
		}
	}
	core := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: resource}
	}
	node := o.NodeMetadata
	if node == nil {
		node = o.Metadata
	}
	var rbac *rbacState
	for _, w := range o.Watch {
		switch w {
		case Pods:
			out = append(out, meta(node, core("pods"), "", "spec.nodeName="+o.NodeName, "pods", newUIDHandler(r, "pods")))
		case Node:
			out = append(out, meta(node, core("nodes"), "", "metadata.name="+o.NodeName, "nodes", newUIDHandler(r, "nodes")))
		case ServiceAccounts:
			for _, ns := range namespaces {
				out = append(out, meta(o.Metadata, core("serviceaccounts"), ns, "", "serviceaccounts", newUIDHandler(r, "serviceaccounts")))
			}
		case ClusterRoles, Roles:
			if rbac == nil {
				rbac = newRBACState(r)
			}
			out = append(out, r.rbacSources(w, namespaces, rbac)...)
		}
	}
	return out
}

// rbacSources are the sources of ClusterRoles and ClusterRoleBindings, or
// of Roles and RoleBindings in each namespace.
func (r *Revoker) rbacSources(w Resource, namespaces []string, st *rbacState) []*source {
	c := r.opts.RBAC
	noWL := watchlist.DoesClientNotSupportWatchListSemantics(c)
	src := func(resource, ns string, expected runtime.Object,
		list func(context.Context, metav1.ListOptions) (runtime.Object, error),
		watch func(context.Context, metav1.ListOptions) (watch.Interface, error)) *source {
		return &source{r: r, name: scoped(resource, ns, ""), resource: resource, expected: expected,
			list: list, watch: watch, noWatchList: noWL, h: st.handler(resource)}
	}
	if w == ClusterRoles {
		return []*source{
			src("clusterroles", "", &rbacv1.ClusterRole{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.ClusterRoles().List(ctx, o)
				}, c.ClusterRoles().Watch),
			src("clusterrolebindings", "", &rbacv1.ClusterRoleBinding{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.ClusterRoleBindings().List(ctx, o)
				}, c.ClusterRoleBindings().Watch),
		}
	}
	var out []*source
	for _, ns := range namespaces {
		out = append(out,
			src("roles", ns, &rbacv1.Role{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.Roles(ns).List(ctx, o)
				}, c.Roles(ns).Watch),
			src("rolebindings", ns, &rbacv1.RoleBinding{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RoleBindings(ns).List(ctx, o)
				}, c.RoleBindings(ns).Watch))
	}
	return out
}

func scoped(resource, ns, field string) string {
	switch {
	case field != "":
		return resource + "?" + field
	case ns != "":
		return ns + "/" + resource
	}
	return resource
}

// run lists and watches until ctx is done, retrying with client-go's
// backoff.
func (s *source) run(ctx context.Context) {
	logger := s.r.logger.WithValues("resource", s.name)
	refl := cache.NewReflectorWithOptions(s, s.expected, s, cache.ReflectorOptions{
		Name:            "revocation " + s.name,
		TypeDescription: s.name,
		Clock:           s.r.clock,
		Logger:          &logger,
		Backoff:         s.r.backoff,
	})
	refl.RunWithContext(ctx)
	s.r.mu.Lock()
	s.watching = false
	s.r.mu.Unlock()
}

// The cache.ListerWatcher the reflector uses: s's client, with s's field
// selector, each list bounded by listTimeout, each watch cancellable by
// the stall timeout; every failure takes s out of sync.

var _ cache.ListerWatcherWithContext = (*source)(nil)

func (s *source) List(o metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), o)
}

func (s *source) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), o)
}

func (s *source) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	o.FieldSelector = s.field
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	obj, err := s.list(ctx, o)
	if err != nil {
		s.failed()
	}
	return obj, err
}

func (s *source) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.FieldSelector = s.field
	ctx, cancel := context.WithCancel(ctx)
	s.r.mu.Lock()
	s.gen++
	gen := s.gen
	s.watching, s.lastSeen, s.stop = true, s.r.clock.Now(), cancel
	s.r.mu.Unlock()
	s.r.poke() // the stall deadline moved
	w, err := s.watch(ctx, o)
	if err != nil {
		cancel()
		s.ended(gen)
		s.failed()
		return nil, err
	}
	s.r.mu.Lock()
	if s.gen == gen {
		s.lastSeen = s.r.clock.Now()
		// Cancelling the request's context ends a watch of a real
		// client; Stop ends any.
		s.stop = func() { w.Stop(); cancel() }
	}
	s.r.mu.Unlock()
	return &stopWatch{Interface: w, stop: func() { w.Stop(); cancel(); s.ended(gen) }}, nil
}

// ended records that watch gen is over.
func (s *source) ended(gen int) {
	s.r.mu.Lock()
	if s.gen == gen {
		s.watching, s.stop = false, nil
	}
	s.r.mu.Unlock()
}

// IsWatchListSemanticsUnSupported tells client-go's reflector whether the
// client can stream lists.
func (s *source) IsWatchListSemanticsUnSupported() bool { return s.noWatchList }

// stopWatch is a watch whose Stop also cancels its request's context and
// records that it ended.
type stopWatch struct {
	watch.Interface
	stop func()
}

func (w *stopWatch) Stop() { w.stop() }

// stopWatch ends the current watch (a stall): the reflector opens another
// from its last resource version, or lists again.
func (s *source) stopWatch() {
	s.r.mu.Lock()
	stop := s.stop
	s.r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// failed takes s out of sync until it lists again.
func (s *source) failed() {
	s.r.mu.Lock()
	s.listed = false
	s.r.mu.Unlock()
	s.r.updateSynced()
}

// seen records that the watch delivered something.
func (s *source) seen() {
	s.r.mu.Lock()
	s.lastSeen = s.r.clock.Now()
	s.r.mu.Unlock()
}

// The cache.ReflectorStore the reflector fills: nothing is stored here
// but what the handler keeps.

var (
	_ cache.ReflectorStore         = (*source)(nil)
	_ cache.ReflectorBookmarkStore = (*source)(nil)
)

func (s *source) Add(obj any) error {
	s.seen()
	s.h.upsert(obj)
	return nil
}

func (s *source) Update(obj any) error {
	s.seen()
	s.h.upsert(obj)
	return nil
}

func (s *source) Delete(obj any) error {
	s.seen()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s.h.remove(obj)
	return nil
}

func (s *source) Replace(objs []any, _ string) error {
	s.r.mu.Lock()
	first := !s.initialized
	s.r.mu.Unlock()
	s.h.replace(objs, first)
	if !first {
		s.r.metrics.RevocationResync(s.resource, "relist")
		s.r.logger.V(2).Info("Listed again", "resource", s.name, "objects", len(objs))
	}
	s.r.mu.Lock()
	s.initialized, s.listed, s.lastSeen = true, true, s.r.clock.Now()
	s.r.mu.Unlock()
	s.r.updateSynced()
	return nil
}

// Bookmark: the watch has delivered everything up to a resource version,
// so a source that had an error since its last list has caught up.
func (s *source) Bookmark(string) error {
	s.r.mu.Lock()
	s.lastSeen = s.r.clock.Now()
	if s.initialized {
		s.listed = true
	}
	s.r.mu.Unlock()
	s.r.updateSynced()
	s.r.poke() // the stall deadline moved
	return nil
}

func (s *source) Resync() error { return nil }
