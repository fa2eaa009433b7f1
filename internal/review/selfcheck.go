package review

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth"
)

// Paths and kinds of the requests a self-check sends.
const (
	selfSubjectReviewPath       = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	selfSubjectAccessReviewPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
)

// SelfCheck asks the API server cfg describes whether the credentials in cfg
// may create resource in group (tokenreviews in authentication.k8s.io, or
// subjectaccessreviews in authorization.k8s.io), with a
// SelfSubjectAccessReview, which every authenticated user may create. It
// first asks who the credentials belong to (a SelfSubjectReview; an API
// server without it, or that refuses it, leaves the identity unnamed).
//
// It returns nil when the API server allows it. When it does not, or
// refuses the credentials themselves (401, 403), the error matches
// [ErrRefused], names the identity and what it needs, and does not match
// reviewauth.ErrUnavailable. When the API server cannot be asked (no
// answer, 429 or 5xx after retries, a malformed answer), the error matches
// reviewauth.ErrUnavailable and not ErrRefused: the service may start and
// report reviews as unavailable until the API server answers.
//
// Errors are prefixed with pkg ("authn: self-check: ...").
func SelfCheck(ctx context.Context, cfg *rest.Config, pkg, group, resource string) error {
	if err := selfCheck(ctx, cfg, group, resource); err != nil {
		return fmt.Errorf("%s: self-check: %w", pkg, err)
	}
	return nil
}

func selfCheck(ctx context.Context, cfg *rest.Config, group, resource string) error {
	c, err := NewClient(cfg)
	if err != nil {
		return err
	}
	// Errors are reported to the caller: no refusal log of our own.
	r := New("SelfSubjectAccessReview", Options{})
	r.noRefusalLog = true

	// Who: one attempt, bounded like any attempt, and optional.
	who := "the service's credentials"
	sctx, cancel := context.WithTimeout(quiet(ctx), DefaultAttemptTimeout)
	ssr, err := Create(sctx, c, selfSubjectReviewPath, authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"),
		&authenticationv1.SelfSubjectReview{})
	cancel()
	if err == nil && ssr.Status.UserInfo.Username != "" {
		who = fmt.Sprintf("user %q", ssr.Status.UserInfo.Username)
	}

	what := fmt.Sprintf("create %s.%s", resource, group)
	var got *authorizationv1.SelfSubjectAccessReview
	err = r.Do(ctx, nil, func(ctx context.Context) error {
		var err error
		got, err = Create(ctx, c, selfSubjectAccessReviewPath, authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview"),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: resource},
			}})
		return err
	})
	var re *reviewauth.ReviewError
	switch {
	case errors.As(err, &re) && errors.Is(err, ErrRefused):
		return &refusal{msg: fmt.Sprintf("the API server refused %s (HTTP %d %s: %v), so it cannot %s; %s",
			who, re.Code, http.StatusText(re.Code), re.Err, what, RBACHint)}
	case err != nil:
		return fmt.Errorf("could not ask the API server whether %s may %s: %w", who, what, err)
	case got.Status.Allowed && got.Status.Denied:
		return &reviewauth.ReviewError{Review: "SelfSubjectAccessReview", Code: http.StatusCreated, Attempts: 1,
			Err: errors.New("malformed answer: both allowed and denied")}
	case !got.Status.Allowed:
		reason := ""
		if got.Status.Reason != "" {
			reason = " (" + got.Status.Reason + ")"
		}
		return &refusal{msg: fmt.Sprintf("%s may not %s%s; %s", who, what, reason, RBACHint)}
	}
	return nil
}

// refusal is a self-check's "not allowed": it matches ErrRefused only.
type refusal struct{ msg string }

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == ErrRefused }
