package httpauth

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus writes st as a metav1.Status JSON body, as the API server does.
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
