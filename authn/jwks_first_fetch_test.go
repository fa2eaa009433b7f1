package authn_test

import (
	"context"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/authn"
)

// TestJWKSFirstFetchWaiters: a token that arrives while the first JWKS
// fetch is in flight waits for it, so a cold-start flood of forgeries
// naming the cluster's key is refused without reviews; one naming an
// unknown key still gets "cannot tell" once the fetch is done.
func TestJWKSFirstFetchWaiters(t *testing.T) {
	k := testKeys()
	entered, release := make(chan struct{}), make(chan struct{})
	raw := jwksOf(k.p256)
	v := mustJWKS(t, func(ctx context.Context) ([]byte, error) {
		close(entered)
		<-release
		return raw, nil
	}, authn.JWKSOptions{})
	forged := forgedWithKid(signGenuine(k.p256, claims), claims)
	unknown := signGenuine(k.rsa2, claims)

	first := make(chan error, 1)
	go func() { first <- v.Verify(context.Background(), forged) }()
	<-entered // the first fetch is in flight
	waiters := make(chan outcome, 2)
	for _, tok := range []string{forged, unknown} {
		go func() { waiters <- outcomeOf(v.Verify(context.Background(), tok)) }()
	}
	select {
	case got := <-waiters:
		// Returned while the fetch is still blocked: it did not wait.
		t.Errorf("Verify() during the first fetch %s without waiting for the fetch", got)
		close(release)
		<-waiters
	case <-time.After(time.Second): // only bounds the failure's detection
		close(release)
		got := map[outcome]int{}
		got[<-waiters]++
		got[<-waiters]++
		if got[refused] != 1 || got[cannotTell] != 1 {
			t.Errorf("waiters' outcomes = %v; want one %s (known kid) and one %s (unknown kid)", got, refused, cannotTell)
		}
	}
	if got := outcomeOf(<-first); got != refused {
		t.Errorf("first Verify(forged) %s; want %s", got, refused)
	}
}

// TestJWKSWaiterDeadline: a caller waiting for a slow fetch gives up at
// its own deadline with "cannot tell", and the fetch goes on for the
// others.
func TestJWKSWaiterDeadline(t *testing.T) {
	k := testKeys()
	entered, release := make(chan struct{}), make(chan struct{})
	v := mustJWKS(t, func(ctx context.Context) ([]byte, error) {
		close(entered)
		<-release
		return jwksOf(k.p256), nil
	}, authn.JWKSOptions{})
	forged := forgedWithKid(signGenuine(k.p256, claims), claims)
	patient := make(chan outcome, 1)
	go func() { patient <- outcomeOf(v.Verify(context.Background(), forged)) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := outcomeOf(v.Verify(ctx, forged)); got != cannotTell {
		t.Errorf("Verify() with a cancelled context during the fetch %s; want %s", got, cannotTell)
	}
	close(release)
	if got := <-patient; got != refused {
		t.Errorf("patient Verify(forged) %s; want %s", got, refused)
	}
}
