package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// auditPolicy is the --audit-policy-file: requests of the resource.k8s.io
// API group (DRA) at level Metadata, at the ResponseComplete and Panic
// stages; every other request is not audited, so the log stays small and
// costs the other flows nothing.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  resources:
  - group: resource.k8s.io
- level: None
`

// auditFlags are the API server flags of the audit log.
func (c *Cluster) auditFlags() []string {
	return []string{
		"--audit-policy-file=" + c.path("audit-policy.yaml"),
		"--audit-log-path=" + c.AuditLogPath(),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
	}
}

// AuditLogPath returns the path of the API server's audit log: JSON lines
// of audit.k8s.io/v1 Events, for requests of the resource.k8s.io API group
// only. It grows across [Cluster.Restart].
func (c *Cluster) AuditLogPath() string { return c.path("audit.log") }

// AuditEvents returns the events of the audit log so far for which keep
// returns true (nil keeps all). The API server writes an event as the
// request completes (blocking mode), which may be just after the client
// has its answer: poll for an event a test expects.
func (c *Cluster) AuditEvents(keep func(*auditv1.Event) bool) ([]auditv1.Event, error) {
	f, err := os.Open(c.AuditLogPath())
	if err != nil {
		return nil, fmt.Errorf("cluster: audit log: %w", err)
	}
	defer f.Close()
	var events []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("cluster: audit log line %q: %w", sc.Bytes(), err)
		}
		if keep == nil || keep(&ev) {
			events = append(events, ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cluster: audit log: %w", err)
	}
	return events, nil
}
