package authz

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// All returns an authorizer that allows only when every one of authorizers
// allows the same attributes. It asks them in order and stops at the first
// that does not allow:
//
//   - an error stops it with DecisionDeny and that error, whatever the
//     decision that came with it (fail closed: an error never allows);
//   - a Deny or a NoOpinion stops it with DecisionDeny and that
//     authorizer's reason: in a conjunction, "no opinion" is "not allowed".
//
// All with no authorizers denies. Use it to put [NodeLocal] in front of a
// SubjectAccessReview [Authorizer]. (To require an Allow for several
// attribute sets, such as the two snapshots of a CSI delta call, use
// [Check], which is All over attribute sets.)
//
// The children are asked through Authorize only: a conditional decision of
// a conditions-aware child is not supported. The returned authorizer
// implements [authorizer.Authorizer] (not conditions-aware) and is safe for
// concurrent use if its children are.
func All(authorizers ...authorizer.UnconditionalAuthorizer) authorizer.Authorizer {
	chain := append([]authorizer.UnconditionalAuthorizer(nil), authorizers...)
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if len(chain) == 0 {
			return authorizer.DecisionDeny, "no authorizers", nil
		}
		var reason string
		for _, az := range chain {
			d, r, err := az.Authorize(ctx, a)
			if err != nil {
				return authorizer.DecisionDeny, r, err
			}
			if d != authorizer.DecisionAllow {
				if d == authorizer.DecisionNoOpinion && r == "" {
					r = "no opinion"
				}
				return authorizer.DecisionDeny, r, nil
			}
			reason = r
		}
		return authorizer.DecisionAllow, reason, nil
	})
}

// First returns an authorizer that asks authorizers in order and returns the
// first Allow or Deny, skipping NoOpinions, like k8s.io/apiserver's union
// (and the union.New chain of kube-apiserver). If every one has no opinion,
// it returns DecisionNoOpinion with their reasons joined.
//
// It differs from apiserver's union on errors: an error stops First at once
// with DecisionDeny and that error, whatever decision came with it, rather
// than being collected while later authorizers are asked. A union that
// continues past an error lets a later, broader authorizer allow what an
// earlier one could not check; First fails closed.
//
// First with no authorizers has no opinion. The children are asked through
// Authorize only. The returned authorizer implements [authorizer.Authorizer]
// (not conditions-aware) and is safe for concurrent use if its children are.
func First(authorizers ...authorizer.UnconditionalAuthorizer) authorizer.Authorizer {
	chain := append([]authorizer.UnconditionalAuthorizer(nil), authorizers...)
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		var reasons []string
		for i, az := range chain {
			d, r, err := az.Authorize(ctx, a)
			if err != nil {
				return authorizer.DecisionDeny, r, err
			}
			switch d {
			case authorizer.DecisionAllow:
				return authorizer.DecisionAllow, r, nil
			case authorizer.DecisionNoOpinion:
				if r != "" {
					reasons = append(reasons, fmt.Sprintf("%d: %s", i, r))
				}
			default: // Deny, and any unknown decision
				return authorizer.DecisionDeny, r, nil
			}
		}
		return authorizer.DecisionNoOpinion, strings.Join(reasons, "\n"), nil
	})
}
