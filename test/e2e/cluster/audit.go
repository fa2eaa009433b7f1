package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// auditPolicy returns the --audit-policy-file: requests of the
// resource.k8s.io API group (DRA) at level Metadata, and every request of
// a user in one of groups (see [Options.AuditUserGroups]) at level
// Metadata, their SubjectAccessReviews at level Request; at the
// ResponseComplete and Panic stages. Every other request is not audited,
// so the log stays small and costs the other flows nothing.
func auditPolicy(groups []string) string {
	var users string
	if len(groups) > 0 {
		quoted := make([]string, len(groups))
		for i, g := range groups {
			quoted[i] = strconv.Quote(g)
		}
		list := "[" + strings.Join(quoted, ", ") + "]"
		users = `- level: Request
  userGroups: ` + list + `
  resources:
  - group: authorization.k8s.io
    resources: [subjectaccessreviews]
- level: Metadata
  userGroups: ` + list + `
`
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
` + users + `- level: Metadata
  resources:
  - group: resource.k8s.io
- level: None
`
}

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
// and of the users of [Options.AuditUserGroups] only. It grows across
// [Cluster.Restart].
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
