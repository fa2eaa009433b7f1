package grpcauth

import (
	"context"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/reviewauth/reviewauth/internal/bearer"
)

const authorizationKey = "authorization"

// FromMetadata returns the [TokenExtractor] that reads the token from the
// "authorization: Bearer <token>" metadata entry, parsed exactly as httpauth
// parses the HTTP Authorization header (RFC 6750). A missing entry, more
// than one entry, another scheme, or an empty token yields no token; a
// malformed token is left to the authenticator to reject. It is what a nil
// [Rule.Token] means. The extractor is safe for concurrent use.
func FromMetadata() TokenExtractor { return metadataToken{} }

// metadataToken is FromMetadata's extractor.
type metadataToken struct{}

func (metadataToken) FromMessage() bool { return false }

func (metadataToken) Token(ctx context.Context, _ any) (string, bool) {
	vals := metadata.ValueFromIncomingContext(ctx, authorizationKey)
	if len(vals) != 1 {
		return "", false
	}
	tok, ok := bearer.Parse(vals[0])
	return tok, ok && tok != ""
}

// FromField returns a [TokenExtractor] that reads the token from the string
// field called name (its proto name, such as "security_token") of the
// request message, as the Kubernetes SnapshotMetadata API does. A request
// that is not a proto.Message, a message with no such singular string field,
// and an empty field all yield no token. The extractor is safe for
// concurrent use.
func FromField(name string) TokenExtractor { return fieldToken{name: protoreflect.Name(name)} }

// fieldToken is FromField's extractor.
type fieldToken struct{ name protoreflect.Name }

func (fieldToken) FromMessage() bool { return true }

func (f fieldToken) Token(_ context.Context, req any) (string, bool) {
	v, ok := stringField(req, f.name)
	return v, ok && v != ""
}

// StringField returns the value of the singular string field called name
// (its proto name) of req, and false when req is not a proto.Message or has
// no such field. An unset field gives "" and true.
func StringField(req any, name string) (string, bool) {
	return stringField(req, protoreflect.Name(name))
}

func stringField(req any, name protoreflect.Name) (string, bool) {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return "", false
	}
	msg := m.ProtoReflect()
	if !msg.IsValid() {
		return "", false
	}
	fd := msg.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return "", false
	}
	return msg.Get(fd).String(), true
}
