package revocation

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// rbacState is what the revoker keeps of RBAC: for each Role and
// ClusterRole a hash of what RBAC reads in it (rules, aggregation rule),
// for each binding its role and subjects. RBAC only grants, so only what
// can take a permission away flushes: a binding deleted, or updated
// without some of its subjects (or to another role), affects those
// subjects; a role deleted or changed affects the subjects of the
// bindings that name it. A new binding or role flushes nothing: a Deny
// cached before it lives DeniedTTL, as without a revoker.
type rbacState struct {
	r        *Revoker
	mu       sync.Mutex
	handlers []*rbacHandler
}

func newRBACState(r *Revoker) *rbacState { return &rbacState{r: r} }

// roleID names a role as a roleRef does: kind, namespace (Roles only), name.
type roleID struct{ kind, namespace, name string }

type binding struct {
	role     roleID
	subjects []rbacv1.Subject
}

func (b binding) equal(o binding) bool {
	return b.role == o.role && slices.Equal(b.subjects, o.subjects)
}

// rbacHandler is one source's part of the state: the roles or the bindings
// of one resource in its scope.
type rbacHandler struct {
	st       *rbacState
	resource string             // roles, clusterroles, rolebindings, clusterrolebindings
	roles    map[string]uint64  // key -> hash of the role's rules
	bindings map[string]binding // key -> binding
}

func (st *rbacState) handler(resource string) *rbacHandler {
	h := &rbacHandler{st: st, resource: resource, roles: make(map[string]uint64), bindings: make(map[string]binding)}
	st.mu.Lock()
	st.handlers = append(st.handlers, h)
	st.mu.Unlock()
	return h
}

// affected collects the users whose decisions a change can change;
// all is set when they cannot be named (a group, too many).
type affected struct {
	all   bool
	users map[string]struct{}
}

func (a *affected) subjects(namespace string, subjects []rbacv1.Subject) {
	if a.users == nil {
		a.users = make(map[string]struct{})
	}
	for _, s := range subjects {
		// As k8s.io/kubernetes' RBAC authorizer reads subjects
		// (appliesToUser): by kind, whatever the API group.
		switch s.Kind {
		case rbacv1.UserKind:
			a.users[s.Name] = struct{}{}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = namespace
			}
			a.users[serviceaccount.MakeUsername(ns, s.Name)] = struct{}{}
		default: // a group, or a subject RBAC does not know: anyone
			a.all = true
		}
	}
}

// usersOfRoleLocked adds the subjects of every binding naming role.
func (st *rbacState) usersOfRoleLocked(role roleID, a *affected) {
	for _, h := range st.handlers {
		for key, b := range h.bindings {
			if b.role == role {
				a.subjects(namespaceOf(key), b.subjects)
			}
		}
	}
}

func namespaceOf(key string) string {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i]
		}
	}
	return ""
}

// decode returns what the handler keeps of obj: a role's ID and hash, or a
// binding.
func (h *rbacHandler) decode(obj any) (key string, role roleID, hash uint64, b binding, ok bool) {
	switch o := obj.(type) {
	case *rbacv1.Role:
		return objectKey(o), roleID{"Role", o.Namespace, o.Name}, hashRules(o.Rules, nil), binding{}, true
	case *rbacv1.ClusterRole:
		return objectKey(o), roleID{"ClusterRole", "", o.Name}, hashRules(o.Rules, o.AggregationRule), binding{}, true
	case *rbacv1.RoleBinding:
		return objectKey(o), roleID{}, 0, binding{role: refOf(o.Namespace, o.RoleRef), subjects: o.Subjects}, true
	case *rbacv1.ClusterRoleBinding:
		return objectKey(o), roleID{}, 0, binding{role: refOf("", o.RoleRef), subjects: o.Subjects}, true
	}
	return "", roleID{}, 0, binding{}, false
}

func (h *rbacHandler) isBinding() bool {
	return h.resource == "rolebindings" || h.resource == "clusterrolebindings"
}

func refOf(namespace string, ref rbacv1.RoleRef) roleID {
	if ref.Kind == "Role" {
		return roleID{"Role", namespace, ref.Name}
	}
	return roleID{ref.Kind, "", ref.Name}
}

// hashRules hashes what RBAC reads in a role. Only equality matters: a
// collision would miss a flush, so the hash is 64 bits over the whole JSON.
func hashRules(rules []rbacv1.PolicyRule, agg *rbacv1.AggregationRule) uint64 {
	h := fnv.New64a()
	b, _ := json.Marshal(rules)
	h.Write(b)
	if agg != nil {
		b, _ = json.Marshal(agg)
		h.Write(b)
	}
	return h.Sum64()
}

func (h *rbacHandler) upsert(obj any) {
	key, role, hash, b, ok := h.decode(obj)
	if !ok {
		return
	}
	var a affected
	h.st.mu.Lock()
	if h.isBinding() {
		old, had := h.bindings[key]
		h.bindings[key] = b
		switch {
		case !had || old.equal(b):
		case old.role != b.role:
			a.subjects(namespaceOf(key), old.subjects)
		default:
			a.subjects(namespaceOf(key), removed(old.subjects, b.subjects))
		}
	} else {
		old, had := h.roles[key]
		h.roles[key] = hash
		if had && old != hash {
			h.st.usersOfRoleLocked(role, &a)
		}
	}
	h.st.mu.Unlock()
	h.st.r.flush(a.all, a.users)
}

// removed returns the subjects of old that are not in now.
func removed(old, now []rbacv1.Subject) []rbacv1.Subject {
	var out []rbacv1.Subject
	for _, s := range old {
		if !slices.Contains(now, s) {
			out = append(out, s)
		}
	}
	return out
}

func (h *rbacHandler) remove(obj any) {
	key, role, _, b, ok := h.decode(obj)
	if !ok {
		return
	}
	var a affected
	h.st.mu.Lock()
	if h.isBinding() {
		if old, had := h.bindings[key]; had {
			a.subjects(namespaceOf(key), old.subjects)
		}
		a.subjects(namespaceOf(key), b.subjects)
		delete(h.bindings, key)
	} else {
		delete(h.roles, key)
		h.st.usersOfRoleLocked(role, &a)
	}
	h.st.mu.Unlock()
	h.st.r.flush(a.all, a.users)
}

// replace: a complete list. After an error, changes may have been missed,
// so every decision is flushed. The first list flushes nothing: until it,
// the revoker was out of sync, and the decisions cached meanwhile live
// their TTL, as without a revoker (flushing them would only cost reviews,
// and would drop what a service keeps to ride out an outage).
func (h *rbacHandler) replace(objs []any, first bool) {
	roles := make(map[string]uint64)
	bindings := make(map[string]binding)
	for _, obj := range objs {
		key, _, hash, b, ok := h.decode(obj)
		switch {
		case !ok:
		case h.isBinding():
			bindings[key] = b
		default:
			roles[key] = hash
		}
	}
	h.st.mu.Lock()
	h.roles, h.bindings = roles, bindings
	h.st.mu.Unlock()
	if !first {
		h.st.r.flush(true, nil)
	}
}
