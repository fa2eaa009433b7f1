package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	sigsyaml "sigs.k8s.io/yaml"
)

// Defaults of the admission policy check.
const (
	// DefaultAdmissionPolicy is the name of the ValidatingAdmissionPolicy
	// and of its binding in deploy/admission-policy.yaml.
	DefaultAdmissionPolicy = "draproxy-resourceslices"
	// DefaultAdmissionCheckInterval is how often draproxy checks, after its
	// start, that the policy and its binding are still there and still
	// mean what they should: often enough that a deleted or weakened
	// policy is reported within a minute, rarely enough that three small
	// reads a minute per node cost the API server nothing worth counting.
	DefaultAdmissionCheckInterval = time.Minute
	// identityLabel selects the policy's parameters (the binding's
	// paramRef.selector as shipped).
	identityLabel = "draproxy.reviewauth.io/driver-identity"
)

// shippedPolicyYAML is deploy/admission-policy.yaml: the policy and the
// binding users apply, which the live ones are compared with.
//
//go:embed deploy/admission-policy.yaml
var shippedPolicyYAML []byte

// errAdmissionPolicy: the admission policy or its binding is missing, or
// does not mean what it should. (A policy that could not be read is a
// *lookupError: "could not check".)
var errAdmissionPolicy = errors.New("draproxy: the admission policy does not confine the drivers' ResourceSlice writes")

// shippedAdmission returns the policy and binding of
// deploy/admission-policy.yaml.
func shippedAdmission() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	var pol *admissionregistrationv1.ValidatingAdmissionPolicy
	var bind *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(shippedPolicyYAML)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		var tm metav1.TypeMeta
		if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
			return nil, nil, err
		}
		switch tm.Kind {
		case "ValidatingAdmissionPolicy":
			pol = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			err = sigsyaml.UnmarshalStrict(doc, pol)
		case "ValidatingAdmissionPolicyBinding":
			bind = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			err = sigsyaml.UnmarshalStrict(doc, bind)
		case "":
			continue
		default:
			err = fmt.Errorf("unexpected kind %q", tm.Kind)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if pol == nil || bind == nil {
		return nil, nil, errors.New("deploy/admission-policy.yaml holds no policy or no binding")
	}
	return pol, bind, nil
}

// admissionCheck checks that the ValidatingAdmissionPolicy draproxy ships,
// and its binding, are in the cluster and mean what they should, so that
// the API server itself confines the ResourceSlice writes of the driver
// identities draproxy serves (deploy/admission-policy.yaml). It reads
// them with draproxy's own credentials (get validatingadmissionpolicies
// and validatingadmissionpolicybindings by name; get and list configmaps
// in the parameters' namespace).
type admissionCheck struct {
	objects         *objects
	policy, binding string
	drivers         *drivers
	shipped         *admissionregistrationv1.ValidatingAdmissionPolicy

	// verified is 1 while the last check found the policy in place, 0
	// otherwise (draproxy_admission_policy_verified).
	verified prometheus.Gauge
}

// newAdmissionCheck returns the check of the policy and binding named
// policy and binding (DefaultAdmissionPolicy when empty) for the
// identities of d. Register its Collector to serve its metric.
func newAdmissionCheck(o *objects, policy, binding string, d *drivers) (*admissionCheck, error) {
	shipped, _, err := shippedAdmission()
	if err != nil {
		return nil, fmt.Errorf("draproxy: deploy/admission-policy.yaml: %w", err)
	}
	if policy == "" {
		policy = DefaultAdmissionPolicy
	}
	if binding == "" {
		binding = DefaultAdmissionPolicy
	}
	return &admissionCheck{
		objects: o, policy: policy, binding: binding, drivers: d, shipped: shipped,
		verified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draproxy_admission_policy_verified",
			Help: "1 when draproxy's last check found its ValidatingAdmissionPolicy and binding in place, listing every driver identity it serves; 0 when they are missing, changed, or could not be read (then draproxy alone confines the drivers' ResourceSlice writes).",
		}),
	}, nil
}

// Collector is the check's metric.
func (c *admissionCheck) Collector() prometheus.Collector { return c.verified }

// check reads the policy, its binding and its parameters, and reports
// whether they are in place (nil), missing or changed (an error matching
// errAdmissionPolicy, naming every problem), or could not be read (a
// *lookupError). It records the result in the metric.
func (c *admissionCheck) check(ctx context.Context) error {
	err := c.verify(ctx)
	if err == nil {
		c.verified.Set(1)
	} else {
		c.verified.Set(0)
	}
	return err
}

func (c *admissionCheck) verify(ctx context.Context) error {
	var problems []string
	var pol admissionregistrationv1.ValidatingAdmissionPolicy
	switch err := c.readTyped(ctx, "ValidatingAdmissionPolicy", "validatingadmissionpolicies", c.policy, &pol); {
	case errors.Is(err, errNotFound):
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %q does not exist", c.policy))
	case err != nil:
		return err
	default:
		problems = append(problems, c.policyProblems(&pol)...)
	}
	var bind admissionregistrationv1.ValidatingAdmissionPolicyBinding
	switch err := c.readTyped(ctx, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", c.binding, &bind); {
	case errors.Is(err, errNotFound):
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicyBinding %q does not exist", c.binding))
	case err != nil:
		return err
	default:
		p, err := c.bindingProblems(ctx, &bind)
		if err != nil {
			return err
		}
		problems = append(problems, p...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errAdmissionPolicy, strings.Join(problems, "; "))
	}
	return nil
}

// readTyped reads the cluster-scoped admissionregistration.k8s.io/v1
// object resource/name into v, checking its kind and name.
func (c *admissionCheck) readTyped(ctx context.Context, kind, resource, name string, v any) error {
	what := kind + " " + fmt.Sprintf("%q", name)
	data, err := c.objects.read(ctx, what, "/apis/admissionregistration.k8s.io/v1/"+resource+"/"+url.PathEscape(name))
	if err != nil {
		return err
	}
	if err := decodeJSON(data, v); err != nil {
		return &lookupError{what: what, err: err}
	}
	var tm metav1.TypeMeta
	var om metav1.ObjectMeta
	switch o := v.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		tm, om = o.TypeMeta, o.ObjectMeta
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		tm, om = o.TypeMeta, o.ObjectMeta
	}
	if tm.Kind != kind || tm.APIVersion != "admissionregistration.k8s.io/v1" || om.Name != name || om.UID == "" {
		return &lookupError{what: what, err: fmt.Errorf("the answer is %s %q (%s), not the object asked for", tm.Kind, om.Name, tm.APIVersion)}
	}
	return nil
}

// policyProblems compares the live policy with the shipped one: what it
// matches, how it fails, and its expressions must be the shipped ones.
func (c *admissionCheck) policyProblems(pol *admissionregistrationv1.ValidatingAdmissionPolicy) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %q: ", c.policy)+fmt.Sprintf(format, args...))
	}
	live, want := &pol.Spec, &c.shipped.Spec
	if live.FailurePolicy != nil && *live.FailurePolicy != admissionregistrationv1.Fail {
		add("failurePolicy is %s, not Fail: a write the policy cannot evaluate would be allowed", *live.FailurePolicy)
	}
	if !reflect.DeepEqual(live.ParamKind, want.ParamKind) {
		add("paramKind is %v, not %v", live.ParamKind, want.ParamKind)
	}
	if why := narrowed(live.MatchConstraints, want.MatchConstraints.ResourceRules); why != "" {
		add("matchConstraints %s", why)
	}
	if !slices.Equal(live.MatchConditions, want.MatchConditions) {
		add("matchConditions differ from draproxy's")
	}
	if !slices.Equal(live.Variables, want.Variables) {
		add("variables differ from draproxy's")
	}
	if !reflect.DeepEqual(live.Validations, want.Validations) {
		add("validations differ from draproxy's")
	}
	// Type checking is done by kube-controller-manager's
	// validatingadmissionpolicy-status-controller; until it has seen this
	// generation there is nothing to read.
	if tc := pol.Status.TypeChecking; tc != nil && pol.Status.ObservedGeneration == pol.Generation {
		for _, w := range tc.ExpressionWarnings {
			add("type checking of %s: %s", w.FieldRef, w.Warning)
		}
	}
	return problems
}

// narrowed says how m fails to match every request of the rules want
// (every ResourceSlice write), or "" when it matches them all.
func narrowed(m *admissionregistrationv1.MatchResources, want []admissionregistrationv1.NamedRuleWithOperations) string {
	if m == nil {
		return "are missing"
	}
	if why := selectorsNarrow(m); why != "" {
		return why
	}
	for _, w := range want {
		covered := false
		for _, r := range m.ResourceRules {
			if ruleCovers(r, w) {
				covered = true
			}
		}
		if !covered {
			return fmt.Sprintf("do not cover %v of %v", w.Operations, w.Resources)
		}
	}
	if m.MatchPolicy != nil && *m.MatchPolicy != admissionregistrationv1.Equivalent {
		return fmt.Sprintf("have matchPolicy %s, not Equivalent", *m.MatchPolicy)
	}
	return ""
}

// selectorsNarrow says how m's selectors or exclusions narrow it, or "".
func selectorsNarrow(m *admissionregistrationv1.MatchResources) string {
	switch {
	case len(m.ExcludeResourceRules) > 0:
		return fmt.Sprintf("exclude %v", m.ExcludeResourceRules)
	case !emptySelector(m.NamespaceSelector):
		return fmt.Sprintf("select namespaces %v", m.NamespaceSelector)
	case !emptySelector(m.ObjectSelector):
		return fmt.Sprintf("select objects %v", m.ObjectSelector)
	}
	return ""
}

func emptySelector(s *metav1.LabelSelector) bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// ruleCovers reports whether r matches every request want matches, with
// no resourceNames.
func ruleCovers(r, want admissionregistrationv1.NamedRuleWithOperations) bool {
	covers := func(have, want []string) bool {
		if slices.Contains(have, "*") {
			return true
		}
		for _, w := range want {
			if !slices.Contains(have, w) {
				return false
			}
		}
		return true
	}
	ops := func(o []admissionregistrationv1.OperationType) []string {
		s := make([]string, len(o))
		for i, v := range o {
			s[i] = string(v)
		}
		return s
	}
	scopeOK := r.Scope == nil || *r.Scope == admissionregistrationv1.AllScopes || *r.Scope == admissionregistrationv1.ClusterScope
	return len(r.ResourceNames) == 0 && scopeOK &&
		covers(r.APIGroups, want.APIGroups) && covers(r.APIVersions, want.APIVersions) &&
		covers(r.Resources, want.Resources) && covers(ops(r.Operations), ops(want.Operations))
}

// bindingProblems checks the live binding: it must bind the policy, deny,
// match every request the policy does, and have parameters that list each
// identity draproxy serves with exactly its driver names.
func (c *admissionCheck) bindingProblems(ctx context.Context, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) ([]string, error) {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicyBinding %q: ", c.binding)+fmt.Sprintf(format, args...))
	}
	if b.Spec.PolicyName != c.policy {
		add("binds policy %q, not %q", b.Spec.PolicyName, c.policy)
	}
	if !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
		add("validationActions are %v, without Deny: the policy's refusals would not refuse", b.Spec.ValidationActions)
	}
	if m := b.Spec.MatchResources; m != nil {
		why := selectorsNarrow(m)
		if why == "" && len(m.ResourceRules) > 0 {
			if n := narrowed(m, c.shipped.Spec.MatchConstraints.ResourceRules); n != "" {
				why = n
			}
		}
		if why != "" {
			add("matchResources %s", why)
		}
	}
	ref := b.Spec.ParamRef
	if ref == nil {
		add("has no paramRef: the policy names no driver identity")
		return problems, nil
	}
	params, err := c.params(ctx, ref)
	if err != nil {
		if le := (*lookupError)(nil); errors.As(err, &le) {
			return nil, err // could not check
		}
		add("%v", err)
		return problems, nil
	}
	byID := map[identity][][]string{}
	for _, p := range params {
		id, names, err := parseParam(p.Data)
		if err != nil {
			// The policy errs on it, and with failurePolicy Fail refuses
			// every ResourceSlice write.
			add("parameter ConfigMap %s/%s: %v", p.Metadata.Namespace, p.Metadata.Name, err)
			continue
		}
		byID[id] = append(byID[id], names)
	}
	for _, id := range c.drivers.ids {
		want := c.drivers.of(id)
		got, ok := byID[id]
		if !ok {
			add("no parameter (ConfigMap in namespace %q selected by %s) lists %s, which draproxy serves (--driver): the policy does not confine its writes", ref.Namespace, paramSelector(ref), id)
			continue
		}
		for _, names := range got {
			if !slices.Equal(names, want) {
				add("a parameter binds %s to the drivers %q, and draproxy to %q (--driver): they must agree", id, names, want)
			}
		}
	}
	return problems, nil
}

// configMap is what draproxy reads of a policy parameter.
type configMap struct {
	objectHeader
	Data map[string]string `json:"data"`
}

// params reads the parameters ref selects: the ConfigMap it names, or the
// ConfigMaps its selector selects in its namespace.
func (c *admissionCheck) params(ctx context.Context, ref *admissionregistrationv1.ParamRef) ([]configMap, error) {
	if ref.Namespace == "" {
		return nil, errors.New("paramRef has no namespace, which parameters of a cluster-scoped resource need")
	}
	if ref.Name != "" {
		cm := objectRef{version: "v1", resource: "configmaps", kind: "ConfigMap", namespace: ref.Namespace, name: ref.Name}
		data, err := c.objects.read(ctx, cm.String(), cm.path())
		if errors.Is(err, errNotFound) {
			return nil, fmt.Errorf("parameter %s does not exist", cm)
		}
		if err != nil {
			return nil, err
		}
		var m configMap
		if err := decodeObject(data, cm, &m); err != nil {
			return nil, &lookupError{what: cm.String(), err: err}
		}
		return []configMap{m}, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
	if err != nil {
		return nil, fmt.Errorf("paramRef.selector: %v", err)
	}
	what := fmt.Sprintf("the ConfigMaps of namespace %q selected by %s", ref.Namespace, paramSelector(ref))
	data, err := c.objects.read(ctx, what, "/api/v1/namespaces/"+url.PathEscape(ref.Namespace)+"/configmaps?labelSelector="+url.QueryEscape(sel.String()))
	if err != nil {
		return nil, err
	}
	var list struct {
		Kind  string      `json:"kind"`
		Items []configMap `json:"items"`
	}
	if err := decodeJSON(data, &list); err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	if list.Kind != "ConfigMapList" {
		return nil, &lookupError{what: what, err: fmt.Errorf("the answer is a %q, not a ConfigMapList", list.Kind)}
	}
	return list.Items, nil
}

func paramSelector(ref *admissionregistrationv1.ParamRef) string {
	if ref.Name != "" {
		return "name " + ref.Name
	}
	sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
	if err != nil || sel.Empty() {
		return "no label selector (every ConfigMap)"
	}
	return "labels " + sel.String()
}

// parseParam reads a parameter's data: serviceAccount NAMESPACE/NAME and
// drivers, a comma-separated list, as the policy reads them. The names
// are returned sorted.
func parseParam(data map[string]string) (identity, []string, error) {
	sa, ok := data["serviceAccount"]
	if !ok {
		return identity{}, nil, errors.New("no serviceAccount (NAMESPACE/NAME)")
	}
	ds, ok := data["drivers"]
	if !ok {
		return identity{}, nil, errors.New("no drivers (NAME[,NAME...])")
	}
	var names []string
	for d := range strings.SplitSeq(ds, ",") {
		if d = strings.TrimSpace(d); d != "" {
			names = append(names, d)
		}
	}
	if len(names) == 0 {
		return identity{}, nil, errors.New("drivers lists no driver name")
	}
	_, id, err := parseDriver(names[0] + "=" + sa)
	if err != nil {
		return identity{}, nil, fmt.Errorf("serviceAccount %q: want NAMESPACE/NAME", sa)
	}
	slices.Sort(names)
	return id, slices.Compact(names), nil
}

// run checks the policy every interval (after the check at start, which
// the caller made) until ctx is done, on clk, and reports each result:
// done, if not nil, is called after each check (tests wait on it). Each
// check has timeout (on clk) to read what it reads.
func (c *admissionCheck) run(ctx context.Context, clk clock.WithDelayedExecution, interval, timeout time.Duration, done func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(interval):
		}
		cctx, stop := withDeadline(ctx, clk, timeout)
		err := c.check(cctx)
		stop()
		if ctx.Err() != nil {
			return
		}
		c.log(ctx, err)
		if done != nil {
			done(err)
		}
	}
}

// log says what a check found: loudly when the policy is missing, changed
// or could not be read, since draproxy then confines the drivers' writes
// alone.
func (c *admissionCheck) log(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		logger.V(2).Info("draproxy: the admission policy confines the drivers' ResourceSlice writes", "policy", c.policy, "binding", c.binding)
	case errors.Is(err, errAdmissionPolicy):
		logger.Error(err, "draproxy: the API server does not confine the drivers' ResourceSlice writes: only draproxy does; apply deploy/admission-policy.yaml and a parameter per --driver identity", "policy", c.policy, "binding", c.binding)
	default:
		logger.Error(err, "draproxy: could not check the admission policy", "policy", c.policy, "binding", c.binding)
	}
}
