package cluster

// OnlyFamily exports onlyFamily for tests.
var OnlyFamily = onlyFamily

// ParseMetrics exports parseMetrics for tests.
var ParseMetrics = parseMetrics

// LocalPath exports localPath for tests.
var LocalPath = localPath

// AuditPolicy exports auditPolicy for tests.
var AuditPolicy = auditPolicy
