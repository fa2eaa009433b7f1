package authz

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/cache"
)

// CacheKey exposes cacheKey to the external tests (fuzzing the encoding).
func CacheKey(k *cache.Keyer, a authorizer.Attributes) cache.Key { return cacheKey(k, a) }

// AttributeBytes exposes attributeBytes to the external tests.
func AttributeBytes(a authorizer.Attributes) int { return attributeBytes(a) }

// SARSpec exposes sarSpec to the external tests.
var SARSpec = sarSpec
