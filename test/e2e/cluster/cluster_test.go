package cluster_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="tokenreviews",verb="POST"} 3
apiserver_request_total{code="201",resource="subjectaccessreviews",verb="POST"} 2
apiserver_request_total{code="200",resource="tokenreviews",verb="POST",note="a \"quoted\" value"} 4
# HELP apiserver_request_total_extra looks alike but is another family.
# TYPE apiserver_request_total_extra gauge
apiserver_request_total_extra 99
# HELP apiserver_request_duration_seconds latency.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{resource="tokenreviews",le="0.1"} 5
apiserver_request_duration_seconds_bucket{resource="tokenreviews",le="+Inf"} 7
apiserver_request_duration_seconds_sum{resource="tokenreviews"} 0.3
apiserver_request_duration_seconds_count{resource="tokenreviews"} 7
`

func TestOnlyFamily(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		family  string
		samples int
	}{
		{name: "counter", family: "apiserver_request_total", samples: 3},
		{name: "look-alike gauge", family: "apiserver_request_total_extra", samples: 1},
		{name: "histogram", family: "apiserver_request_duration_seconds", samples: 1},
		{name: "absent", family: "nope", samples: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := cluster.ParseMetrics(cluster.OnlyFamily([]byte(sampleMetrics), tc.family))
			if err != nil {
				t.Fatalf("ParseMetrics(OnlyFamily(%q)) error = %v; want nil", tc.family, err)
			}
			if len(got) > 1 {
				t.Errorf("OnlyFamily(%q) kept %d families; want at most 1", tc.family, len(got))
			}
			if n := len(got[tc.family].GetMetric()); n != tc.samples {
				t.Errorf("OnlyFamily(%q) kept %d series; want %d", tc.family, n, tc.samples)
			}
		})
	}
}

// FuzzOnlyFamily checks that filtering never changes what the parser reads
// for the kept family.
func FuzzOnlyFamily(f *testing.F) {
	f.Add([]byte(sampleMetrics), "apiserver_request_total")
	f.Add([]byte(sampleMetrics), "apiserver_request_duration_seconds")
	f.Add([]byte("x 1\nx{a=\"b\"} 2\n"), "x")
	f.Add([]byte("# TYPE y summary\ny{quantile=\"0.5\"} 1\ny_sum 2\ny_count 3\n"), "y")
	f.Fuzz(func(t *testing.T, raw []byte, name string) {
		all, err := cluster.ParseMetrics(raw)
		if err != nil {
			return
		}
		some, err := cluster.ParseMetrics(cluster.OnlyFamily(raw, name))
		if err != nil {
			t.Fatalf("ParseMetrics(OnlyFamily(%q)) error = %v; want nil since the whole input parses", name, err)
		}
		if !proto.Equal(all[name], some[name]) {
			t.Fatalf("OnlyFamily(%q) family = %v; want %v", name, some[name], all[name])
		}
	})
}

func TestCAIssue(t *testing.T) {
	t.Parallel()
	ca, other := mustCA(t), mustCA(t)
	now := time.Now()
	tests := []struct {
		name    string
		opts    cluster.CertOptions
		roots   *cluster.CA
		wantErr string
	}{
		{name: "client cert", opts: cluster.CertOptions{CommonName: "alice", Organizations: []string{"dev", "ops"}}, roots: ca},
		{name: "expired", opts: cluster.CertOptions{CommonName: "bob", NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)}, roots: ca, wantErr: "expired"},
		{name: "other CA", opts: cluster.CertOptions{CommonName: "eve"}, roots: other, wantErr: "unknown authority"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			certPEM, _, err := ca.Issue(tc.opts)
			if err != nil {
				t.Fatalf("Issue(%+v) error = %v", tc.opts, err)
			}
			block, _ := pem.Decode(certPEM)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cert.Verify(x509.VerifyOptions{Roots: tc.roots.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Verify(%s) = %v; want nil", tc.name, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Verify(%s) = %v; want an error containing %q", tc.name, err, tc.wantErr)
			}
			if cert.Subject.CommonName != tc.opts.CommonName || strings.Join(cert.Subject.Organization, ",") != strings.Join(tc.opts.Organizations, ",") {
				t.Errorf("Issue(%+v) subject = %v; want CN=%s O=%v", tc.opts, cert.Subject, tc.opts.CommonName, tc.opts.Organizations)
			}
		})
	}
}

func mustCA(t *testing.T) *cluster.CA {
	t.Helper()
	ca, err := cluster.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
