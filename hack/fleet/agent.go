package main

import (
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
)

// This file is the simulator's only use of the reviewauth library: one
// Authenticator and one Authorizer per node agent, built as the examples
// build them (package serving: authn.Flags and authz.Flags with
// their defaults, which are authn.NewForConfig and authz.NewForConfig with
// zero Options but the audience), plus the simulation's clock.

// newReviewauthAgent returns a node agent's authenticator and authorizer
// with reviewauth's defaults.
func newReviewauthAgent(cfg *rest.Config, clk clock.Clock) (*agent, error) {
	return newReviewauthAgentTTLs(cfg, clk, 0, 0, 0)
}

// newReviewauthAgentTTLs is newReviewauthAgent with the identity, Allow and
// Deny cache TTLs set (zero: the default).
func newReviewauthAgentTTLs(cfg *rest.Config, clk clock.Clock, success, allowed, denied time.Duration) (*agent, error) {
	an, err := authn.NewForConfig(cfg, authn.Options{Audiences: []string{audience}, SuccessTTL: success, Clock: clk})
	if err != nil {
		return nil, err
	}
	az, err := authz.NewForConfig(cfg, authz.Options{AllowedTTL: allowed, DeniedTTL: denied, Clock: clk})
	if err != nil {
		return nil, err
	}
	// What a revoker (package revocation) calls, for the configurations
	// that run one: the caches' own invalidation.
	return &agent{authn: an, authz: az, revoke: an.Revoke, forgetAll: az.ForgetAll}, nil
}
