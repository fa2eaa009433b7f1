package serving_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/serving"
)

// TestRevocationFlags: the revocation flags take the program's defaults,
// and Validate names the flag at fault when they cannot work.
func TestRevocationFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		defaults serving.RevocationFlags
		args     []string
		want     string
		watch    string
	}{
		{"unknown", serving.RevocationFlags{}, []string{"--revocation-watch=secrets"}, `--revocation-watch: unknown "secrets"`, ""},
		{"pods without a node", serving.RevocationFlags{}, []string{"--revocation-watch=pods"}, "--revocation-watch=pods needs --node-name", ""},
		{"node without a node", serving.RevocationFlags{}, []string{"--revocation-watch=node"}, "--revocation-watch=node needs --node-name", ""},
		{"namespaces for nothing", serving.RevocationFlags{}, []string{"--revocation-watch=clusterroles", "--revocation-namespaces=a"}, "--revocation-namespaces needs", ""},
		{"as node for nothing", serving.RevocationFlags{}, []string{"--revocation-watch=roles", "--revocation-as-node"}, "--revocation-as-node needs", ""},
		{"everything", serving.RevocationFlags{}, []string{"--node-name=n", "--revocation-watch=pods,node,serviceaccounts,clusterroles,roles", "--revocation-namespaces=a,b", "--revocation-as-node"}, "", "pods,node,serviceaccounts,clusterroles,roles"},
		{"the program's default", serving.RevocationFlags{Watch: []string{"pods", "node"}, AsNode: true}, []string{"--node-name=n"}, "", "pods,node"},
		{"the program's default, off", serving.RevocationFlags{Watch: []string{"pods", "node"}, AsNode: true}, []string{"--revocation-watch=", "--revocation-as-node=false"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := serving.Flags{Revocation: tt.defaults}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs)
			f.AddRevocationFlags(fs)
			if err := fs.Parse(append(tt.args, "--audience=a")); err != nil {
				t.Fatal(err)
			}
			err := f.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
			if got := strings.Join(f.Revocation.Watch, ","); err == nil && got != tt.watch {
				t.Errorf("Watch = %q; want %q", got, tt.watch)
			}
		})
	}
}

// apiRecorder is a reverse proxy to the API server that records the path,
// query and impersonation of each request.
type apiRecorder struct {
	mu   sync.Mutex
	seen []string // "PATH?QUERY as USER"
}

func (r *apiRecorder) requests(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.seen {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// TestBuildRevoker: with --revocation-watch, Build returns a Revoker over
// the authenticator's and the SAR authorizer's caches, reading with the
// service's kubeconfig; with --revocation-as-node it reads this node's
// pods and Node as system:node:NODE (and RBAC as itself); it is out of
// sync, and says so in the registry, while the API server does not serve
// the lists; without the flag there is none.
func TestBuildRevoker(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	tlsCfg, err := rest.TLSConfigFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(srv.URL())
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &apiRecorder{}
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.URL.Path+"?"+r.URL.RawQuery+" as "+r.Header.Get("Impersonate-User"))
		rec.mu.Unlock()
		(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: tr}).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: front.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: srv.AdminToken()}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}

	none := serving.Flags{Kubeconfig: path, Audiences: []string{"svc.example"}, NoJWKSPreverify: true}
	b, err := none.Build(t.Context())
	if err != nil || b.Revoker != nil {
		t.Fatalf("Build() without --revocation-watch = %v, %v; want no revoker", b, err)
	}

	f := serving.Flags{Kubeconfig: path, Audiences: []string{"svc.example"}, NoJWKSPreverify: true,
		Revocation: serving.RevocationFlags{Watch: []string{"pods", "node", "clusterroles"}, AsNode: true}}
	f.Authz.NodeName = "n1"
	b, err = f.Build(t.Context())
	if err != nil || b.Revoker == nil {
		t.Fatalf("Build() = %v, %v; want a revoker", b, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Revoker.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(rec.requests("/api/v1/pods")) == 0 || len(rec.requests("/api/v1/nodes")) == 0 || len(rec.requests("/apis/rbac.authorization.k8s.io/v1/clusterroles")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the revoker read nothing through the kubeconfig: %q", rec.requests("/"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b.Revoker.Synced() {
		t.Errorf("Synced() while the API server serves no list = true; want false")
	}
	if got := syncedGauge(t, b); got != 0 {
		t.Errorf("reviewauth_revocation_synced = %v; want 0", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	for _, tc := range []struct{ prefix, field, as string }{
		{"/api/v1/pods", "fieldSelector=spec.nodeName%3Dn1", "system:node:n1"},
		{"/api/v1/nodes", "fieldSelector=metadata.name%3Dn1", "system:node:n1"},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "", ""},
	} {
		for _, r := range rec.requests(tc.prefix) {
			if !strings.Contains(r, tc.field) || !strings.HasSuffix(r, " as "+tc.as) {
				t.Errorf("request %q; want %q, as %q", r, tc.field, tc.as)
			}
		}
	}
}

// syncedGauge is reviewauth_revocation_synced in b's registry.
func syncedGauge(t *testing.T, b *serving.Built) float64 {
	t.Helper()
	mfs, err := b.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "reviewauth_revocation_synced" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no reviewauth_revocation_synced in the registry")
	return -1
}
