// Command flood judges connection admission at the scale users run it:
// it starts rbacproxy and the snapshot-metadata sidecar at their default
// flags, and beside them kube-rbac-proxy v0.21's net/http server and the
// upstream CSI snapshot-metadata sidecar's grpc-go server (each as a
// process of its own, against one fake API server in a process of its
// own), floods each in turn from attack processes of its own, and prints,
// per attack and server, how a legitimate client fared.
//
// The peers are built as they build themselves (kube-rbac-proxy v0.21's
// cmd/kube-rbac-proxy/app: an http.Server with only a TLS config, x/net's
// http2.ConfigureServer with its IdleTimeout of 90 s, 100 streams and
// 256 KiB frames, k8s.io/apiserver's delegating authenticator and
// authorizer with its TTLs of 2 m and 5 m / 30 s; external-snapshot-metadata
// v0.2.0's pkg/internal/server/grpc: grpc.NewServer with grpc.Creds only,
// and per call a TokenReview, a SubjectAccessReview and live GETs of the
// VolumeSnapshot and its content). Their code is not copied here; see
// peers.go.
//
// Attacks (each attacker holds one connection of its kind and opens the
// next as soon as the server closes it): idle TLS, slowloris, body-less
// POSTs (Content-Length 100000000), TCP without TLS, TLS without the
// HTTP/2 preface, a preface without streams, 100 gRPC streams without a
// request, HTTP/2 rapid reset, junk tokens (for the gRPC servers, well
// formed GetMetadataAllocated requests naming the client's namespace and
// snapshot, with a junk security_token: the upstream sidecar refuses a
// request without them before reading its token). Each at 600 attackers and at
// 1.75 times the default connection budget (serving.DefaultBudget, from
// the servers' open-file limit, which -nofile sets), all from the
// legitimate client's address (127.0.0.1) and spread over 250 others
// (127.1.0.x).
//
// Legitimate client: during the measured window, a call on a new
// connection every 100 ms and one on a connection opened before the attack
// every 100 ms (a scrape of /metrics with a token for the HTTP servers;
// GetMetadataAllocated with a freshly minted token for the gRPC ones),
// each bounded at 2 s. Reported per row: the share of each answered
// within 1 s, their p50/p95, and the server's CPU (share of one core over
// the window), peak resident memory and peak open files.
//
// Usage (from the repository's root):
//
//	go -C hack/flood run . [-servers rbacproxy,kube-rbac-proxy,snapshotmetadata,upstream-sidecar]
//	    [-kinds idle,slowloris,...] [-scales 600,1.75x] [-sources same,many]
//	    [-window 5s] [-key ecdsa|rsa] [-nofile N] [-cpus 0.6] [-out table.md]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reviewauth/reviewauth/internal/reliability"
	"github.com/reviewauth/reviewauth/serving"
)

// envRole runs this program as one of the processes of a run.
const envRole = "FLOOD_ROLE"

func main() {
	reliability.MaybeAttack()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch role := os.Getenv(envRole); role {
	case "":
		err = run(ctx, os.Args[1:], os.Stdout)
	case roleAPIServer:
		err = serveAPI(ctx)
	case roleKRP:
		err = serveKRP(ctx)
	case roleUpstreamSidecar:
		err = serveUpstreamSidecar(ctx)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

// params are the command line.
type params struct {
	servers, kinds, scales, sources []string
	settle, window, interval        time.Duration
	manySources                     int
	key                             string
	out                             string
	repo                            string
	verbose                         bool
	// nofile, if positive, is every server's open-file limit (soft and
	// hard, through prlimit(1)), peers included.
	nofile uint64
	// cpus, if positive, is every server's CPU limit in cores, each in a
	// cgroup of its own (see cpuLimit).
	cpus float64
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	p := params{}
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	servers := fs.String("servers", strings.Join(serverNames(), ","), "servers to attack, in this order")
	kinds := fs.String("kinds", "", "attacks (default: every one that applies to the server): "+strings.Join(kindNames(), ","))
	scales := fs.String("scales", "600,1.75x", "attackers per attack: a number, or a multiple of the default connection budget (Nx)")
	sources := fs.String("sources", "same,many", "same: every attacker from 127.0.0.1, the legitimate client's address; many: spread over -many-sources addresses")
	fs.IntVar(&p.manySources, "many-sources", 250, "source addresses of the 'many' attacks")
	fs.DurationVar(&p.settle, "settle", 11*time.Second, "how long the attack runs, once every attacker has made its first attempt, before the window: past the servers' 10 s timeouts, so that the window sees the steady state")
	fs.DurationVar(&p.window, "window", 5*time.Second, "how long each row is measured")
	fs.DurationVar(&p.interval, "interval", reliability.Interval, "time between two calls of each legitimate client")
	fs.StringVar(&p.key, "key", "ecdsa", "the servers' certificate key: ecdsa (P-256) or rsa (2048)")
	fs.StringVar(&p.out, "out", "", "also write the table to this file")
	fs.StringVar(&p.repo, "repo", "", "the repository's root (default: ../.. of this directory)")
	fs.BoolVar(&p.verbose, "v", false, "log each row's details to stderr")
	fs.Uint64Var(&p.nofile, "nofile", 0, "every server's open-file limit, soft and hard (0: this process's): the default budget follows it (serving.DefaultBudget), so that the 1.75x rows fit a small machine; the peers get the same")
	fs.Float64Var(&p.cpus, "cpus", 0, "every server's CPU limit in cores (0.6: 60 ms of CPU per 100 ms), each in a cgroup of its own, peers included (0: none; needs root and the cgroup cpu controller)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p.servers, p.kinds, p.scales, p.sources = split(*servers), split(*kinds), split(*scales), split(*sources)
	if p.repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		p.repo = filepath.Clean(filepath.Join(wd, "..", ".."))
	}
	for _, s := range p.servers {
		if serverByName(s) == nil {
			return fmt.Errorf("-servers: unknown server %q (known: %s)", s, strings.Join(serverNames(), ", "))
		}
	}
	for _, k := range p.kinds {
		if kindByName(k) == nil {
			return fmt.Errorf("-kinds: unknown attack %q (known: %s)", k, strings.Join(kindNames(), ", "))
		}
	}
	// The budget the servers choose at their defaults: from their open-file
	// limit (and memory: no cgroup limit is set here, so the machine's,
	// which on any machine this runs on allows more than the files do).
	budget := serving.DefaultBudget()
	if p.nofile > 0 {
		budget = serving.BudgetFor(p.nofile, 0)
	}
	var ns []int
	for _, s := range p.scales {
		n, err := scale(s, budget)
		if err != nil {
			return fmt.Errorf("-scales: %w", err)
		}
		ns = append(ns, n)
	}
	for _, s := range p.sources {
		if s != "same" && s != "many" {
			return fmt.Errorf("-sources: %q is neither same nor many", s)
		}
	}

	env, err := startEnv(ctx, p)
	if err != nil {
		return err
	}
	defer env.close()

	var rows []row
	header := tableHeader(env, budget)
	fmt.Fprint(stdout, header)
	for _, name := range p.servers {
		srv := serverByName(name)
		for _, k := range srv.kinds() {
			if len(p.kinds) > 0 && !contains(p.kinds, k.name) {
				continue
			}
			for _, n := range ns {
				for _, src := range p.sources {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					sources := 1
					if src == "many" {
						sources = p.manySources
					}
					r, err := env.measure(ctx, srv, k, n, sources)
					if err != nil {
						return fmt.Errorf("%s, %s, %d attackers: %w", srv.name, k.name, n, err)
					}
					rows = append(rows, r)
					fmt.Fprint(stdout, r.markdown())
				}
			}
		}
	}
	if p.out != "" {
		var b strings.Builder
		b.WriteString(header)
		for _, r := range rows {
			b.WriteString(r.markdown())
		}
		b.WriteString(tableFooter(rows))
		if err := os.WriteFile(p.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, tableFooter(rows))
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// scale is the number of attackers s names: a number, or Nx of budget.
func scale(s string, budget int) (int, error) {
	if f, ok := strings.CutSuffix(s, "x"); ok {
		m, err := strconv.ParseFloat(f, 64)
		if err != nil || m <= 0 {
			return 0, fmt.Errorf("%q: want a positive multiple, like 1.75x", s)
		}
		return int(m * float64(budget)), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive number of attackers", s)
	}
	return n, nil
}

// machine describes where the run happens.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs, %s", model, runtime.NumCPU(), runtime.Version())
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
