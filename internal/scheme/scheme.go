// Package scheme holds the one runtime.Scheme reviewauth needs: the kinds
// its review client reads and authtest serves.
package scheme

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme holds the kinds internal/review's client reads and authtest serves: those of
// authentication.k8s.io/v1 (TokenReview, TokenRequest, SelfSubjectReview)
// and authorization.k8s.io/v1 (SubjectAccessReview,
// SelfSubjectAccessReview), and metav1.Status. It is a scheme of those two
// groups rather than client-go's kubernetes/scheme, which registers every
// built-in API group (some 55 packages in every binary) for no answer a
// review client reads; an answer of any other kind is an error either way.
// It must not be modified.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(authenticationv1.AddToScheme(s))
	utilruntime.Must(authorizationv1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// Decoder decodes those kinds, in JSON or protobuf.
var Decoder = serializer.NewCodecFactory(Scheme).UniversalDeserializer()
