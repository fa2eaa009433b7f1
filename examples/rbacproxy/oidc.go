package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"

	"github.com/reviewauth/reviewauth"
)

// oidcFlags are kube-rbac-proxy's --oidc-* flags.
type oidcFlags struct {
	issuerURL, clientID, caFile   string
	usernameClaim, usernamePrefix string
	groupsClaim, groupsPrefix     string
	signingAlgs                   []string
}

func (o *oidcFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.issuerURL, "oidc-issuer", "", "The URL of the OpenID issuer, only HTTPS scheme will be accepted. If set, it will be used to verify the OIDC JSON Web Token (JWT).")
	fs.StringVar(&o.clientID, "oidc-clientID", "", "The client ID for the OpenID Connect client, must be set if oidc-issuer-url is set. Tokens must name it in their audience.")
	fs.StringVar(&o.groupsClaim, "oidc-groups-claim", "groups", "Identifier of groups in JWT claim, by default set to 'groups'")
	fs.StringVar(&o.usernameClaim, "oidc-username-claim", "email", "Identifier of the user in JWT claim, by default set to 'email'")
	fs.StringVar(&o.usernamePrefix, "oidc-username-prefix", "", "If provided, the username will be prefixed with this value to prevent conflicts with other authentication strategies.")
	fs.StringVar(&o.groupsPrefix, "oidc-groups-prefix", "", "If provided, all groups will be prefixed with this value to prevent conflicts with other authentication strategies.")
	fs.StringArrayVar(&o.signingAlgs, "oidc-sign-alg", []string{"RS256"}, "Supported signing algorithms, default RS256")
	fs.StringVar(&o.caFile, "oidc-ca-file", "", "If set, the OpenID server's certificate will be verified by one of the authorities in the oidc-ca-file, otherwise the host's root CA set will be used.")
}

func (o *oidcFlags) enabled() bool { return o.issuerURL != "" }

func (o *oidcFlags) validate() error {
	if !o.enabled() {
		return nil
	}
	if o.clientID == "" {
		return errors.New("--oidc-clientID is required with --oidc-issuer")
	}
	return nil
}

// authenticator returns k8s.io/apiserver's OIDC (JWT) authenticator for the
// flags, the one kube-apiserver uses for --oidc-*; it fetches the issuer's
// discovery document and keys in the background until ctx is done. Its
// answers keep the three-way result: a token from another issuer is "not
// mine" (nil, false, nil), so that a union passes it on; a token it cannot
// check because the issuer's keys were never fetched is
// reviewauth.ErrUnavailable (503), not a rejection.
func (o *oidcFlags) authenticator(ctx context.Context) (authenticator.Token, error) {
	opts := oidc.Options{
		JWTAuthenticator: apiserver.JWTAuthenticator{
			Issuer: apiserver.Issuer{URL: o.issuerURL, Audiences: []string{o.clientID}},
			ClaimMappings: apiserver.ClaimMappings{
				Username: apiserver.PrefixedClaimOrExpression{Claim: o.usernameClaim, Prefix: &o.usernamePrefix},
			},
		},
		SupportedSigningAlgs: o.signingAlgs,
	}
	if o.groupsClaim != "" {
		opts.JWTAuthenticator.ClaimMappings.Groups = apiserver.PrefixedClaimOrExpression{Claim: o.groupsClaim, Prefix: &o.groupsPrefix}
	}
	if o.caFile != "" {
		raw, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		ca, err := dynamiccertificates.NewStaticCAContent("oidc-ca", raw)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		opts.CAContentProvider = ca
	}
	a, err := oidc.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("--oidc-*: %w", err)
	}
	return oidcToken{a}, nil
}

type oidcToken struct {
	a oidc.AuthenticatorTokenWithHealthCheck
}

func (o oidcToken) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	resp, ok, err := o.a.AuthenticateToken(ctx, token)
	if err != nil && o.a.HealthCheck() != nil {
		return nil, false, fmt.Errorf("rbacproxy: the OIDC issuer's keys have not been fetched: %w", reviewauth.ErrUnavailable)
	}
	return resp, ok, err
}
