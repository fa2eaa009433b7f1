package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reviewauth/reviewauth/authtest"
)

// The roles this program runs as (envRole).
const (
	roleAPIServer       = "apiserver"
	roleKRP             = "kube-rbac-proxy"
	roleUpstreamSidecar = "upstream-sidecar"
)

// What the fake cluster holds.
const (
	scraperName  = "system:serviceaccount:monitoring:prometheus"
	backupName   = "system:serviceaccount:apps:backup"
	proxyAud     = "rbacproxy.example"
	driver       = "hostpath.csi.k8s.io"
	sidecarAud   = "snapshotmetadata.example"
	snapshotNS   = "apps"
	snapshotName = "snap-1"
	contentName  = "snapcontent-1"
	snapGroup    = "snapshot.storage.k8s.io"
)

// envDir is the directory the API server process writes its kubeconfig to.
const envDir = "FLOOD_DIR"

// apiInfo is what the API server process prints once it serves.
type apiInfo struct {
	// Kubeconfig reaches the API server (the front, which serves the
	// snapshot objects and passes the rest to authtest) as its
	// administrator.
	Kubeconfig string
	// Mint is a plain HTTP URL; GET Mint+"?who=scraper|backup&n=N"
	// answers N fresh tokens, one a line.
	Mint string
	// Upstream is the plain HTTP server the proxies forward to.
	Upstream string
}

// serveAPI runs the fake API server: authtest (TokenReview,
// SubjectAccessReview, JWKS) behind a front that also serves the
// SnapshotMetadataService, VolumeSnapshot and VolumeSnapshotContent the
// sidecars read; a token minting endpoint for the legitimate clients; and
// the proxies' upstream.
func serveAPI(ctx context.Context) error {
	api := authtest.NewServer(authtest.WithHTTP2()) // as a real API server: HTTP/2
	defer api.Close()
	api.SetPolicy(authtest.Rules(
		authtest.Rule{Users: []string{scraperName}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}},
		authtest.Rule{Users: []string{backupName}, Verbs: []string{"get"}, APIGroups: []string{snapGroup},
			Resources: []string{"volumesnapshots"}, Namespaces: []string{snapshotNS}},
	))
	dir := os.Getenv(envDir)

	// The front: snapshot objects here, the rest to authtest.
	target, _ := url.Parse(api.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(api.Config().CAData) {
		return fmt.Errorf("authtest's CA")
	}
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	rp.ErrorLog = log.New(io.Discard, "", 0)
	mux := http.NewServeMux()
	mux.Handle("/", rp)
	mux.HandleFunc("/apis/cbt.storage.k8s.io/", serveSMS)
	mux.HandleFunc("/apis/snapshot.storage.k8s.io/", serveSnapshots)
	frontCert, frontCA, err := selfSigned("flood-api", "ecdsa")
	if err != nil {
		return err
	}
	frontLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	front := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{frontCert}, NextProtos: []string{"h2", "http/1.1"}},
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = front.ServeTLS(frontLn, "", "") }()
	defer front.Close()

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["flood"] = &clientcmdapi.Cluster{Server: "https://" + frontLn.Addr().String(), CertificateAuthorityData: frontCA}
	cfg.AuthInfos["flood"] = &clientcmdapi.AuthInfo{Token: api.AdminToken()}
	cfg.Contexts["flood"] = &clientcmdapi.Context{Cluster: "flood", AuthInfo: "flood"}
	cfg.CurrentContext = "flood"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}

	// Tokens for the legitimate clients.
	scraper := &user.DefaultInfo{Name: scraperName, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"}}
	backup := &user.DefaultInfo{Name: backupName, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"}}
	mint := http.NewServeMux()
	mint.HandleFunc("/mint", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		n = min(max(n, 1), 10000)
		u, aud := user.Info(scraper), proxyAud
		if r.URL.Query().Get("who") == "backup" {
			u, aud = backup, sidecarAud
		}
		exp := time.Now().Add(3 * time.Hour)
		for range n {
			fmt.Fprintln(w, api.MintToken(u, []string{aud}, exp))
		}
	})
	mintLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mintSrv := &http.Server{Handler: mint}
	go func() { _ = mintSrv.Serve(mintLn) }()
	defer mintSrv.Close()

	// The proxies' upstream: a small metrics page.
	page := strings.Repeat("# TYPE up gauge\nup 1\n", 20)
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, page)
	})}
	go func() { _ = up.Serve(upLn) }()
	defer up.Close()

	if err := json.NewEncoder(os.Stdout).Encode(apiInfo{Kubeconfig: kubeconfig, Mint: "http://" + mintLn.Addr().String() + "/mint",
		Upstream: "http://" + upLn.Addr().String() + "/"}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// serveSMS serves the SnapshotMetadataService named after the driver.
func serveSMS(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/apis/cbt.storage.k8s.io/v1alpha1/snapshotmetadataservices/"+driver {
		notFound(w)
		return
	}
	writeObject(w, map[string]any{
		"apiVersion": "cbt.storage.k8s.io/v1alpha1", "kind": "SnapshotMetadataService",
		"metadata": map[string]any{"name": driver, "resourceVersion": "1", "uid": "sms-uid"},
		"spec":     map[string]any{"audience": sidecarAud, "address": "snapshotmetadata.example:443", "caCert": "Zmxvb2Q="},
	})
}

func volumeSnapshot() map[string]any {
	return map[string]any{
		"apiVersion": snapGroup + "/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": snapshotName, "namespace": snapshotNS, "uid": "vs-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"source": map[string]any{"persistentVolumeClaimName": "data"}},
		"status":   map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": contentName},
	}
}

func volumeSnapshotContent() map[string]any {
	return map[string]any{
		"apiVersion": snapGroup + "/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": contentName, "uid": "vsc-uid", "resourceVersion": "1"},
		"spec": map[string]any{"driver": driver, "deletionPolicy": "Delete",
			"source":            map[string]any{"volumeHandle": "vol-1"},
			"volumeSnapshotRef": map[string]any{"namespace": snapshotNS, "name": snapshotName, "uid": "vs-uid"}},
		"status": map[string]any{"readyToUse": true, "snapshotHandle": "handle-1"},
	}
}

// serveSnapshots serves the one VolumeSnapshot and its content: gets,
// lists, and watches that stay open without events.
func serveSnapshots(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/apis/"+snapGroup+"/v1/")
	var item map[string]any
	var kind string
	switch p {
	case "volumesnapshots", "namespaces/" + snapshotNS + "/volumesnapshots":
		item, kind = volumeSnapshot(), "VolumeSnapshotList"
	case "volumesnapshotcontents":
		item, kind = volumeSnapshotContent(), "VolumeSnapshotContentList"
	case "namespaces/" + snapshotNS + "/volumesnapshots/" + snapshotName:
		writeObject(w, volumeSnapshot())
		return
	case "volumesnapshotcontents/" + contentName:
		writeObject(w, volumeSnapshotContent())
		return
	default:
		notFound(w)
		return
	}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// client-go's streaming list (WatchListClient, on by
			// default): the object, then the bookmark that ends the
			// initial events, as the API server sends them.
			enc := json.NewEncoder(w)
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": item})
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{
				"apiVersion": item["apiVersion"], "kind": item["kind"],
				"metadata": map[string]any{"resourceVersion": "1",
					"annotations": map[string]any{"k8s.io/initial-events-end": "true"}}}})
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		return
	}
	writeObject(w, map[string]any{"apiVersion": snapGroup + "/v1", "kind": kind,
		"metadata": map[string]any{"resourceVersion": "1"}, "items": []any{item}})
}

func writeObject(w http.ResponseWriter, obj any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

func notFound(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
}
