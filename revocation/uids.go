package revocation

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
)

// uidHandler revokes the identities bound to deleted objects of one
// resource (pods, nodes, service accounts). It keeps each object's key and
// UID, nothing else: a pod costs its name and UID.
type uidHandler struct {
	r        *Revoker
	resource string

	mu   sync.Mutex
	objs map[string]types.UID // namespace/name -> UID
}

func newUIDHandler(r *Revoker, resource string) *uidHandler {
	return &uidHandler{r: r, resource: resource, objs: make(map[string]types.UID)}
}

func objectKey(m interface {
	GetNamespace() string
	GetName() string
}) string {
	return m.GetNamespace() + "/" + m.GetName()
}

// upsert: an object created or changed. The same name with another UID is
// another object: the one it replaced was deleted. An object being
// deleted is revoked DeletionLeeway after its deletionTimestamp.
func (h *uidHandler) upsert(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key, uid := objectKey(m), m.GetUID()
	h.mu.Lock()
	old, had := h.objs[key]
	h.objs[key] = uid
	h.mu.Unlock()
	if had && old != uid {
		h.r.unschedule(old)
		h.r.revoke(h.resource, []types.UID{old}, "replaced by an object of the same name")
	}
	if dt := m.GetDeletionTimestamp(); dt != nil {
		h.r.schedule(uid, dt.Add(DeletionLeeway), h.resource)
	}
}

// remove: an object deleted.
func (h *uidHandler) remove(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := objectKey(m)
	uids := []types.UID{m.GetUID()}
	h.mu.Lock()
	if old, ok := h.objs[key]; ok && old != m.GetUID() {
		uids = append(uids, old)
	}
	delete(h.objs, key)
	h.mu.Unlock()
	h.r.unschedule(uids...)
	h.r.revoke(h.resource, uids, "deleted")
}

// replace: a complete list. Whatever is no longer there (or is there with
// another UID) was deleted while the watch was not delivering.
func (h *uidHandler) replace(objs []any, _ bool) {
	now := make(map[string]types.UID, len(objs))
	var gone []types.UID
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		now[objectKey(m)] = m.GetUID()
		if dt := m.GetDeletionTimestamp(); dt != nil {
			h.r.schedule(m.GetUID(), dt.Add(DeletionLeeway), h.resource)
		}
	}
	h.mu.Lock()
	for key, uid := range h.objs {
		if now[key] != uid {
			gone = append(gone, uid)
		}
	}
	h.objs = now
	h.mu.Unlock()
	slices.Sort(gone)
	h.r.unschedule(gone...)
	h.r.revoke(h.resource, gone, "gone from a new list")
}
