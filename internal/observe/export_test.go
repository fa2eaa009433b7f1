package observe

// Buckets are the latency buckets, for tests.
var Buckets = buckets
