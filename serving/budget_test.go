package serving_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"testing/fstest"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/serving"
)

func TestDefaultBudget(t *testing.T) {
	t.Parallel()
	const (
		mi = 1 << 20
		gi = 1 << 30
	)
	for _, tt := range []struct {
		name          string
		files, memory uint64
		want          int
	}{
		{"neither known", 0, 0, serving.DefaultMaxConnections},
		{"files only", 20000, 0, (20000 - 128) / 3},
		{"memory only", 0, 128 * mi, 256},
		{"container: 128 MiB, 1,048,576 files", 1 << 20, 128 * mi, 256},
		{"machine: 8 GiB, 65,536 files", 65536, 8 * gi, 16384},
		{"files smaller than the reserve", 100, 8 * gi, 1},
		{"files at the reserve", 128, 8 * gi, 1},
		{"two past the reserve", 130, 8 * gi, 1},
		{"three files a connection, for two less one", 128 + 5, 8 * gi, 1},
		{"three files a connection, for two", 128 + 6, 8 * gi, 2},
		{"-nofile 4096 (hack/flood)", 4096, 24 * gi, 1322},
		{"memory below one connection's share", 1 << 20, 256 << 10, 1},
		{"memory at one connection's share", 1 << 20, 4 * serving.ConnectionMemory, 1},
		{"memory at two connections' share", 1 << 20, 8 * serving.ConnectionMemory, 2},
		{"huge", 1 << 62, 1 << 62, 1<<31 - 1},
	} {
		if got := serving.BudgetFor(tt.files, tt.memory); got != tt.want {
			t.Errorf("%s: BudgetFor(%d files, %d bytes) = %d; want %d", tt.name, tt.files, tt.memory, got, tt.want)
		}
	}
	if got := serving.DefaultBudget(); got < 1 {
		t.Errorf("DefaultBudget() = %d; want at least 1", got)
	}
}

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       24576000 kB\nMemFree:  1 kB\n")}
	for _, tt := range []struct {
		name string
		fs   fstest.MapFS
		want uint64
	}{
		{"nothing readable", fstest.MapFS{}, 0},
		{"machine memory", fstest.MapFS{"proc/meminfo": meminfo}, 24576000 * 1024},
		{"meminfo malformed", fstest.MapFS{"proc/meminfo": {Data: []byte("MemTotal: lots kB\n")}}, 0},
		{"cgroup v2 max: the machine's", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("0::/kubepods/pod1/c1\n")},
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": {Data: []byte("max\n")},
		}, 24576000 * 1024},
		{"cgroup v2 container limit", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("0::/kubepods/pod1/c1\n")},
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": {Data: []byte("134217728\n")},
		}, 134217728},
		{"cgroup v2 parent's limit smaller", fstest.MapFS{
			"proc/self/cgroup":                          {Data: []byte("0::/kubepods/pod1/c1\n")},
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": {Data: []byte("134217728\n")},
			"sys/fs/cgroup/kubepods/pod1/memory.max":    {Data: []byte("67108864\n")},
			"sys/fs/cgroup/kubepods/memory.max":         {Data: []byte("max\n")},
		}, 67108864},
		{"cgroup v2 in a container (its cgroup at the root)", fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("268435456")},
		}, 268435456},
		{"cgroup v1", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("4:memory:/process_api/x\n3:cpuset:/\n0::/\n")},
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
		}, 1 << 30},
		{"cgroup v1 no limit", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("5:cpu,memory:/\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")},
		}, 24576000 * 1024},
		{"cgroup file garbage", fstest.MapFS{
			"proc/meminfo":             meminfo,
			"proc/self/cgroup":         {Data: []byte("0::/../../etc\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("-5")},
		}, 24576000 * 1024},
	} {
		if got := serving.FileMemoryLimit(tt.fs); got != tt.want {
			t.Errorf("%s: memory limit = %d; want %d", tt.name, got, tt.want)
		}
	}
}

// FuzzMemoryLimit: whatever the cgroup and meminfo files hold, the limit
// read is 0 (unknown) or a positive number of bytes below the "no limit"
// values, and reading never panics.
func FuzzMemoryLimit(f *testing.F) {
	f.Add("0::/a/b\n", "max\n", "134217728\n", "MemTotal: 1024 kB\n")
	f.Add("4:memory:/x\n", "", "9223372036854771712", "MemTotal: 18446744073709551615 kB\n")
	f.Add("0::/../..\n", "-1", "0", "")
	f.Fuzz(func(t *testing.T, cgroup, leaf, parent, meminfo string) {
		fsys := fstest.MapFS{
			"proc/self/cgroup":                             {Data: []byte(cgroup)},
			"proc/meminfo":                                 {Data: []byte(meminfo)},
			"sys/fs/cgroup/a/b/memory.max":                 {Data: []byte(leaf)},
			"sys/fs/cgroup/a/memory.max":                   {Data: []byte(parent)},
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": {Data: []byte(leaf)},
		}
		got := serving.FileMemoryLimit(fsys)
		if got >= 1<<60 && got%1024 != 0 {
			t.Fatalf("memory limit %d: a cgroup value this large is no limit", got)
		}
		if b := serving.BudgetFor(20000, got); b < 1 || b > (20000-128)/3 {
			t.Fatalf("BudgetFor(20000, %d) = %d; want 1 to %d", got, b, (20000-128)/3)
		}
	})
}

// envMemoryServer makes this test binary serve for
// BenchmarkConnectionMemory (see maybeMemoryServer).
const envMemoryServer = "SERVING_MEMORY_SERVER"

// BenchmarkConnectionMemory measures what an admitted idle connection
// costs an HTTPServer (heap and goroutine stacks in use after a GC, in a
// server process of its own): the figure behind serving.ConnectionMemory.
// Sub-benchmarks: a TLS connection that completed a request and stays
// open (keep-alive), over HTTP/1.1 and over HTTP/2. Reported as
// bytes/conn.
func BenchmarkConnectionMemory(b *testing.B) {
	const conns = 500
	for _, proto := range []string{"http1", "h2"} {
		b.Run(proto, func(b *testing.B) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envMemoryServer+"=1")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { stdin.Close(); _ = cmd.Wait() }()
			lines := bufio.NewScanner(stdout)
			read := func() string {
				if !lines.Scan() {
					b.Fatalf("memory server: %v", lines.Err())
				}
				return lines.Text()
			}
			inUse := func() int64 {
				fmt.Fprintln(stdin, "measure")
				n, err := strconv.ParseInt(read(), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
			addr := read()
			var perConn float64
			for b.Loop() {
				before := inUse()
				var clients []*http.Client
				for range conns {
					tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: proto == "h2"}
					if proto == "http1" {
						tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
					}
					c := &http.Client{Transport: tr}
					req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
					req.Header.Set("Authorization", "Bearer x")
					resp, err := c.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.ProtoMajor != map[string]int{"http1": 1, "h2": 2}[proto] {
						b.Fatalf("served over %s; want %s", resp.Proto, proto)
					}
					clients = append(clients, c)
				}
				perConn = float64(inUse()-before) / conns
				for _, c := range clients {
					c.CloseIdleConnections()
				}
			}
			b.ReportMetric(perConn, "bytes/conn")
		})
	}
}

// maybeMemoryServer serves for BenchmarkConnectionMemory when this binary
// runs as its server: an HTTPServer at its defaults on a self-signed
// certificate, its address on the first line of stdout; each line read
// from stdin is answered with the heap and stacks in use after a GC. It
// exits when stdin closes.
func maybeMemoryServer() {
	if os.Getenv(envMemoryServer) == "" {
		return
	}
	certs, err := serving.NewCertificates(serving.CertificateOptions{SelfSigned: serving.SelfSigned{Name: "memory"}})
	if err != nil {
		panic(err)
	}
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{Certificates: certs})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx := klog.NewContext(context.Background(), logr.Discard())
	go func() { _ = srv.Serve(ctx, ln) }()
	fmt.Println(ln.Addr().String())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Println(ms.HeapInuse + ms.StackInuse)
	}
	os.Exit(0)
}
