package cluster

import (
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics fetches the API server's /metrics as the admin and returns the
// parsed families by name.
func (c *Cluster) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	raw, err := c.rawMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return parseMetrics(raw)
}

func (c *Cluster) rawMetrics(ctx context.Context) ([]byte, error) {
	raw, err := c.clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: get /metrics: %w", err)
	}
	return raw, nil
}

func parseMetrics(raw []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("cluster: parse /metrics: %w", err)
	}
	return fams, nil
}

// onlyFamily keeps the text-format lines of the family name (its HELP and
// TYPE comments and its samples, histogram and summary suffixes included):
// the API server's /metrics is megabytes, and parsing it all is slow.
func onlyFamily(raw []byte, name string) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(raw) {
		var sample []byte
		switch {
		case bytes.HasPrefix(line, []byte("# HELP ")), bytes.HasPrefix(line, []byte("# TYPE ")):
			sample = line[len("# HELP "):]
		case bytes.HasPrefix(line, []byte("#")):
			continue
		default:
			sample = line
		}
		end := bytes.IndexAny(sample, "{ ")
		if end < 0 {
			continue
		}
		n := string(sample[:end])
		switch n {
		case name, name + "_bucket", name + "_sum", name + "_count":
			out.Write(line)
		}
	}
	return out.Bytes()
}

// MetricValue returns the sum, over every series of the metric name whose
// labels include all of labels, of its value (counter, gauge or untyped) or
// its sample count (histogram, summary). A metric with no matching series
// gives 0. For example
//
//	c.MetricValue(ctx, "apiserver_request_total", map[string]string{"resource": "tokenreviews"})
//
// counts the TokenReviews the API server answered since it last started
// (counters restart from zero on [Cluster.Restart]). The API server updates
// this counter when it finishes the response, so a client can see its answer
// a moment before the count moves; poll for an expected value.
func (c *Cluster) MetricValue(ctx context.Context, name string, labels map[string]string) (float64, error) {
	raw, err := c.rawMetrics(ctx)
	if err != nil {
		return 0, err
	}
	fams, err := parseMetrics(onlyFamily(raw, name))
	if err != nil {
		return 0, err
	}
	fam, ok := fams[name]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		}
	}
	return sum, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
