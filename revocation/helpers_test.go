package revocation_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/revocation"
)

// epoch is the fake clock's start.
var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// recorder is a fake IdentityRevoker and DecisionForgetter: every call is
// a line on calls ("revoke UID", "user NAME", "all").
type recorder struct{ calls chan string }

func newRecorder() *recorder { return &recorder{calls: make(chan string, 4096)} }

func (r *recorder) Revoke(uids ...types.UID) {
	for _, u := range uids {
		r.calls <- "revoke " + string(u)
	}
}
func (r *recorder) ForgetUser(name string) { r.calls <- "user " + name }
func (r *recorder) ForgetAll()             { r.calls <- "all" }

// resource is what the fake API server holds of one resource: the list it
// answers, and the watches opened on it (each a fake watcher the test
// drives).
type resource struct {
	mu      sync.Mutex
	list    []runtime.Object
	listErr error
	rv      int
	calls   []string // "list FIELDS" or "watch FIELDS rv=RV"
	watches chan *watch.RaceFreeFakeWatcher
}

// set makes the list answer objs, at a new resource version.
func (r *resource) set(objs ...runtime.Object) {
	r.mu.Lock()
	r.list, r.rv = objs, r.rv+1
	r.mu.Unlock()
}

// failLists makes every list fail with err (nil: succeed again).
func (r *resource) failLists(err error) {
	r.mu.Lock()
	r.listErr = err
	r.mu.Unlock()
}

func (r *resource) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// harness runs a Revoker against client-go's fake metadata and typed
// clients, on a fake clock.
type harness struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	rec   *recorder
	m     *metrics.Metrics
	rev   *revocation.Revoker
	res   map[string]*resource
	waits chan time.Time // what Run's loop waits for, each time it waits
	last  map[string]*watch.RaceFreeFakeWatcher

	stop func()
}

// noWatchList hides client-go's fake from the reflector's streaming lists,
// as the fake itself says it must be.
type noWatchList struct{ rbacv1client.RbacV1Interface }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

var resources = []string{"pods", "nodes", "serviceaccounts", "roles", "rolebindings", "clusterroles", "clusterrolebindings"}

// newHarness builds a Revoker of opts with the fakes filled in where opts
// (after setup, which may use the harness's clock and recorder) leaves them
// nil.
func newHarness(t *testing.T, opts revocation.Options, setup ...func(*harness, *revocation.Options)) *harness {
	t.Helper()
	h := &harness{t: t, clock: clocktesting.NewFakeClock(epoch), rec: newRecorder(), m: metrics.New(),
		res: make(map[string]*resource), waits: make(chan time.Time, 4096), last: make(map[string]*watch.RaceFreeFakeWatcher)}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	cs := k8sfake.NewClientset()
	for _, name := range resources {
		res := &resource{watches: make(chan *watch.RaceFreeFakeWatcher, 16)}
		h.res[name] = res
		listReactor := func(a k8stesting.Action) (bool, runtime.Object, error) {
			res.mu.Lock()
			defer res.mu.Unlock()
			res.calls = append(res.calls, "list "+a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
			if res.listErr != nil {
				return true, nil, res.listErr
			}
			return true, listOf(name, a.GetNamespace(), res.list, fmt.Sprint(res.rv)), nil
		}
		watchReactor := func(a k8stesting.Action) (bool, watch.Interface, error) {
			w := watch.NewRaceFreeFake()
			wr := a.(k8stesting.WatchAction).GetWatchRestrictions()
			res.mu.Lock()
			res.calls = append(res.calls, "watch "+wr.Fields.String()+" rv="+wr.ResourceVersion)
			res.mu.Unlock()
			res.watches <- w
			return true, w, nil
		}
		meta.PrependReactor("list", name, listReactor)
		meta.PrependWatchReactor(name, watchReactor)
		cs.PrependReactor("list", name, listReactor)
		cs.PrependWatchReactor(name, watchReactor)
	}
	for _, f := range setup {
		f(h, &opts)
	}
	if opts.Metadata == nil {
		opts.Metadata = meta
	}
	if opts.RBAC == nil {
		opts.RBAC = noWatchList{cs.RbacV1()}
	}
	if opts.Identities == nil {
		opts.Identities = h.rec
	}
	if opts.Decisions == nil {
		opts.Decisions = h.rec
	}
	opts.Clock = h.clock
	opts.Metrics = h.m
	rev, err := revocation.New(opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	h.rev = rev
	revocation.SetTestHooks(rev, time.Millisecond, func(next time.Time) { h.waits <- next })
	return h
}

// start runs the Revoker until the test ends, and checks that Run returns
// nil.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.rev.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run() = %v; want nil", err)
			}
		})
	}
	h.t.Cleanup(h.stop)
}

// within bounds every wait for another goroutine: a test that reaches it
// has failed.
const within = 20 * time.Second

// watcher returns the next watch opened on resource name.
func (h *harness) watcher(name string) *watch.RaceFreeFakeWatcher {
	h.t.Helper()
	select {
	case w := <-h.res[name].watches:
		h.last[name] = w
		return w
	case <-time.After(within):
		h.t.Fatalf("no watch of %s opened; calls: %q", name, h.res[name].log())
		return nil
	}
}

// expect receives len(want) calls and compares them, in any order, with
// want.
func (h *harness) expect(want ...string) {
	h.t.Helper()
	got := make([]string, 0, len(want))
	for range want {
		select {
		case c := <-h.rec.calls:
			got = append(got, c)
		case <-time.After(within):
			h.t.Fatalf("calls = %q, then nothing; want %q", got, want)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		h.t.Errorf("calls = %q; want %q", got, want)
	}
}

// expectNone checks that no call has been made so far. Call it after a
// call that must come after anything wrongly made (a sync point).
func (h *harness) expectNone() {
	h.t.Helper()
	select {
	case c := <-h.rec.calls:
		h.t.Errorf("unexpected call %q", c)
	default:
	}
}

// waitArmed waits until Run's loop waits for next: it has done what was
// due and nothing runs before next.
func (h *harness) waitArmed(next time.Time) {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case got := <-h.waits:
			if got.Equal(next) {
				return
			}
		case <-deadline:
			h.t.Fatalf("Run's loop never waited for %v", next)
		}
	}
}

// waitFor waits until cond holds, as other goroutines make progress.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// metric returns the value of series name whose labels include labels
// (name=value pairs), or -1 when there is none.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.m)
	mfs, err := reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := make(map[string]string)
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// listOf is the list the fake API server answers for resource name in
// namespace ns ("": all) at resourceVersion rv.
func listOf(name, ns string, objs []runtime.Object, rv string) runtime.Object {
	var in []runtime.Object
	for _, o := range objs {
		m, _ := o.(metav1.Object)
		if ns == "" || m.GetNamespace() == ns {
			in = append(in, o.DeepCopyObject())
		}
	}
	lm := metav1.ListMeta{ResourceVersion: rv}
	switch name {
	case "roles":
		l := &rbacv1.RoleList{ListMeta: lm}
		for _, o := range in {
			l.Items = append(l.Items, *o.(*rbacv1.Role))
		}
		return l
	case "clusterroles":
		l := &rbacv1.ClusterRoleList{ListMeta: lm}
		for _, o := range in {
			l.Items = append(l.Items, *o.(*rbacv1.ClusterRole))
		}
		return l
	case "rolebindings":
		l := &rbacv1.RoleBindingList{ListMeta: lm}
		for _, o := range in {
			l.Items = append(l.Items, *o.(*rbacv1.RoleBinding))
		}
		return l
	case "clusterrolebindings":
		l := &rbacv1.ClusterRoleBindingList{ListMeta: lm}
		for _, o := range in {
			l.Items = append(l.Items, *o.(*rbacv1.ClusterRoleBinding))
		}
		return l
	}
	l := &metav1.List{ListMeta: lm}
	for _, o := range in {
		l.Items = append(l.Items, runtime.RawExtension{Object: o})
	}
	return l
}

// object returns a metadata-only object of kind (Pod, Node,
// ServiceAccount), named "ns/name" or "name".
func object(kind, nsName, uid string) *metav1.PartialObjectMetadata {
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok {
		ns, name = "", nsName
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: "1"},
	}
}

func pod(nsName, uid string) *metav1.PartialObjectMetadata { return object("Pod", nsName, uid) }

// deleting returns o with a deletionTimestamp at t.
func deleting(o *metav1.PartialObjectMetadata, t time.Time) *metav1.PartialObjectMetadata {
	o = o.DeepCopy()
	o.DeletionTimestamp = &metav1.Time{Time: t}
	return o
}

// bookmark is a bookmark event's object.
func bookmark() *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99"}}
}

// expired is the error a watch delivers when its resource version is too
// old: the reflector lists again.
func expired() *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
}
