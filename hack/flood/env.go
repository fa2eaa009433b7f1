package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is what every row of a run shares: the fake API server, the
// programs built, the certificate.
type env struct {
	p            params
	dir          string
	api          *exec.Cmd
	info         apiInfo
	certFile     string
	keyFile      string
	caPool       *x509.CertPool
	bins         map[string]string // program -> path
	tokens       map[string]*tokenPool
	scraperToken string
}

// startEnv builds the programs, makes the certificate and starts the API
// server process.
func startEnv(ctx context.Context, p params) (_ *env, err error) {
	dir, err := os.MkdirTemp("", "flood-")
	if err != nil {
		return nil, err
	}
	e := &env{p: p, dir: dir, bins: map[string]string{}, tokens: map[string]*tokenPool{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	for _, prog := range []string{"rbacproxy", "snapshotmetadata"} {
		out := filepath.Join(dir, prog)
		// As the images and the CI build them: static, -trimpath.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./"+prog)
		cmd.Dir = filepath.Join(p.repo, "examples")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", prog, err, b)
		}
		e.bins[prog] = out
	}
	certPEM, keyPEM, caPEM, err := servingCert(p.key)
	if err != nil {
		return nil, err
	}
	e.certFile, e.keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(e.certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	e.caPool = x509.NewCertPool()
	e.caPool.AppendCertsFromPEM(caPEM)

	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e.api = exec.Command(self)
	e.api.Env = append(os.Environ(), envRole+"="+roleAPIServer, envDir+"="+dir)
	stdout, err := e.api.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if e.api.Stderr, err = os.Create(filepath.Join(dir, "apiserver.log")); err != nil {
		return nil, err
	}
	if err := e.api.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("the API server process: %v", err)
	}
	if err := json.Unmarshal(line, &e.info); err != nil {
		return nil, fmt.Errorf("the API server process said %q: %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	for _, who := range []string{"scraper", "backup"} {
		e.tokens[who] = newTokenPool(e.info.Mint + "?who=" + who)
	}
	if e.scraperToken, err = e.tokens["scraper"].get(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	for _, tp := range e.tokens {
		tp.close()
	}
	if e.api != nil && e.api.Process != nil {
		_ = e.api.Process.Signal(syscall.SIGTERM)
		_ = e.api.Wait()
	}
	_ = os.RemoveAll(e.dir)
}

// tokenPool hands out fresh tokens, fetched in batches.
type tokenPool struct {
	url  string
	ch   chan string
	stop chan struct{}
}

func newTokenPool(url string) *tokenPool {
	tp := &tokenPool{url: url, ch: make(chan string, 400), stop: make(chan struct{})}
	go tp.fill()
	return tp
}

func (tp *tokenPool) fill() {
	for {
		resp, err := http.Get(tp.url + "&n=200")
		if err != nil {
			select {
			case <-tp.stop:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case tp.ch <- sc.Text():
			case <-tp.stop:
				resp.Body.Close()
				return
			}
		}
		resp.Body.Close()
	}
}

func (tp *tokenPool) get(ctx context.Context) (string, error) {
	select {
	case t := <-tp.ch:
		return t, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (tp *tokenPool) close() { close(tp.stop) }

// proc is a server running as a process.
type proc struct {
	cmd    *exec.Cmd
	addr   string // host:port
	exited chan error
}

// startProc runs bin with args and env (added to this process's) and
// returns once it prints "listening on ADDR".
func (e *env) startProc(name, bin string, args, environ []string) (*proc, error) {
	p := &proc{cmd: exec.Command(bin, args...), exited: make(chan error, 1)}
	if e.p.nofile > 0 {
		// Soft and hard: Go raises the soft limit to the hard one at start.
		n := strconv.FormatUint(e.p.nofile, 10)
		p.cmd = exec.Command("prlimit", append([]string{"--nofile=" + n + ":" + n, "--", bin}, args...)...)
	}
	p.cmd.Env = append(os.Environ(), environ...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd.Stderr = logf
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	if e.p.cpus > 0 {
		remove, err := cpuLimit(name, p.cmd.Process.Pid, e.p.cpus)
		if err != nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
			return nil, err
		}
		go func() { p.exited <- p.cmd.Wait(); remove() }()
	} else {
		go func() { p.exited <- p.cmd.Wait() }()
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case ready <- strings.TrimPrefix(a, "https://"):
				default:
				}
			}
		}
	}()
	select {
	case p.addr = <-ready:
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("%s exited before listening: %v (see %s)", name, err, logf.Name())
	case <-time.After(60 * time.Second):
		p.stop()
		// The directory goes with the run: say what the program logged.
		b, _ := os.ReadFile(logf.Name())
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		return nil, fmt.Errorf("%s did not listen within 60s; the end of its log:\n%s", name, b)
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM, then SIGKILL after 15s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// servingCert makes a CA and a serving certificate for 127.0.0.1 and
// localhost signed by it, with an ECDSA P-256 or an RSA 2048 key.
func servingCert(alg string) (certPEM, keyPEM, caPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flood-ca"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, _ = x509.ParseCertificate(caDER)
	var pub, priv any
	switch alg {
	case "ecdsa":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, nil, err
		}
		pub, priv = &k.PublicKey, k
	case "rsa":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, nil, err
		}
		pub, priv = &k.PublicKey, k
	default:
		return nil, nil, nil, fmt.Errorf("-key: %q is neither ecdsa nor rsa", alg)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "flood"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, pub, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// selfSigned is a self-signed certificate for 127.0.0.1, and its PEM.
func selfSigned(cn, alg string) (tls.Certificate, []byte, error) {
	certPEM, keyPEM, caPEM, err := servingCert(alg)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(append(certPEM, caPEM...), keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, errors.New(cn + ": " + err.Error())
	}
	return cert, caPEM, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// cpuLimit puts process pid in a cgroup of its own limited to cpus cores
// (a CFS quota over a 100 ms period), on cgroup v2 (cpu.max) or v1 (the
// cpu controller's cpu.cfs_quota_us), and returns a function that removes
// the cgroup once the process has exited. It is moved there just after it
// started: what it ran before, a few milliseconds, is not limited.
func cpuLimit(name string, pid int, cpus float64) (func(), error) {
	const period = 100000 // microseconds
	quota := int64(cpus * period)
	if quota < 1000 {
		return nil, fmt.Errorf("-cpus %v: at least 0.01", cpus)
	}
	leaf := fmt.Sprintf("flood-%s-%d", name, pid)
	var dir string
	var files [][2]string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup", leaf)
		files = [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quota, period)}}
	} else {
		dir = filepath.Join("/sys/fs/cgroup/cpu", leaf)
		files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-cpus: %w", err)
	}
	remove := func() { _ = os.Remove(dir) }
	files = append(files, [2]string{"cgroup.procs", strconv.Itoa(pid)})
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			remove()
			return nil, fmt.Errorf("-cpus: %s: %w", f[0], err)
		}
	}
	return remove, nil
}
