package httpauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// writeStatus writes st as a metav1.Status JSON body, as the API server does:
// TestStatusBodiesMatchAPIServer compares the bodies with those
// k8s.io/apiserver's response writers produce, byte for byte.
func writeStatus(w http.ResponseWriter, st *apierrors.StatusError) {
	status := st.ErrStatus
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	status.Status = metav1.StatusFailure
	body, err := json.Marshal(&status)
	if err != nil {
		// metav1.Status always marshals; keep the status code regardless.
		body = nil
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(append(body, '\n'))
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

func writeUnavailable(w http.ResponseWriter, retryAfter time.Duration) {
	secs := retryAfterSeconds(retryAfter)
	st := apierrors.NewServiceUnavailable("the authentication or authorization service is unavailable; retry later")
	st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(min(secs, math.MaxInt32))}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeStatus(w, st)
}

// sanitizer keeps a Forbidden message from looking like HTML, as
// k8s.io/apiserver's does.
var sanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

// forbidden is k8s.io/apiserver's responsewriters.ForbiddenStatusError,
// written here: importing that package for its few lines would put about
// 200 packages (audit, admission, CEL, storage) into every binary that uses
// httpauth. TestStatusBodiesMatchAPIServer checks that the two agree byte
// for byte.
func forbidden(a authorizer.Attributes, reason string) *apierrors.StatusError {
	msg := sanitizer.Replace(forbiddenMessage(a))
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.GetAPIGroup(), Resource: a.GetResource()}, a.GetName(), errors.New(msg))
}

func forbiddenMessage(a authorizer.Attributes) string {
	username := ""
	if u := a.GetUser(); u != nil {
		username = u.GetName()
	}
	if !a.IsResourceRequest() {
		return fmt.Sprintf("User %q cannot %s path %q", username, a.GetVerb(), a.GetPath())
	}
	resource := a.GetResource()
	if sub := a.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	if ns := a.GetNamespace(); ns != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", username, a.GetVerb(), resource, a.GetAPIGroup(), ns)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", username, a.GetVerb(), resource, a.GetAPIGroup())
}
