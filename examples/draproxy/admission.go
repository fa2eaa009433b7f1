package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
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

// DefaultAdmissionCheckInterval is how often draproxy checks, after its
// start and with --require-admission-policy, that the admission policies
// are still there and still mean what they should: often enough that a
// deleted or weakened policy is reported within a minute, rarely enough
// that two small lists a minute per node cost the API server nothing
// worth counting.
const DefaultAdmissionCheckInterval = time.Minute

// shippedPolicyYAML is deploy/driver/admission-policy.yaml: the policy and
// binding each driver part applies, which the live ones are compared
// with.
//
//go:embed deploy/driver/admission-policy.yaml
var shippedPolicyYAML []byte

// errAdmissionPolicy: no admission policy confines a driver identity as
// it should. (Policies that could not be read are a *lookupError: "could
// not check".)
var errAdmissionPolicy = errors.New("draproxy: the admission policies do not confine the drivers' ResourceSlice writes")

// shippedAdmission returns the policy and binding of
// deploy/driver/admission-policy.yaml.
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
		return nil, nil, errors.New("deploy/driver/admission-policy.yaml holds no policy or no binding")
	}
	if _, err := readValues(pol.Spec.Variables, pol.Spec.Variables); err != nil {
		return nil, nil, fmt.Errorf("deploy/driver/admission-policy.yaml: %w", err)
	}
	return pol, bind, nil
}

// The value variables of the policy, in order: what each driver part
// writes into its copy (CEL string literals, kustomize's replacements
// split on '"'). Every other part of the policy is the same in every
// copy.
var valueVariables = []string{"driverNamespace", "serviceAccount", "drivers", "exempt"}

// policyValues are the values of one copy of the policy: the driver's
// namespace, its ServiceAccount, the driver names it publishes and the
// ServiceAccounts of the namespace the policy does not confine, as the
// policy's CEL reads them (lists split on ',', trimmed, empty entries
// dropped; sorted).
type policyValues struct {
	namespace, serviceAccount string
	drivers, exempt           []string
}

// readValues reads the value variables of vars, whose expressions must be
// those of shipped but for the string literal each starts with.
func readValues(vars, shipped []admissionregistrationv1.Variable) (policyValues, error) {
	var v policyValues
	if len(vars) < len(valueVariables) || len(shipped) < len(valueVariables) {
		return v, errors.New("the policy has no value variables")
	}
	lit := make([]string, len(valueVariables))
	for i, name := range valueVariables {
		if vars[i].Name != name || shipped[i].Name != name {
			return v, fmt.Errorf("variable %d is %q, not %q", i, vars[i].Name, name)
		}
		value, rest, ok := cutLiteral(vars[i].Expression)
		_, want, okShipped := cutLiteral(shipped[i].Expression)
		if !ok || !okShipped || rest != want {
			return v, fmt.Errorf("variable %s is %q: want a string literal, then %q", name, vars[i].Expression, want)
		}
		lit[i] = value
	}
	list := func(s string) []string {
		var out []string
		for e := range strings.SplitSeq(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return policyValues{namespace: lit[0], serviceAccount: lit[1], drivers: list(lit[2]), exempt: list(lit[3])}, nil
}

// cutLiteral splits a CEL expression that starts with a string literal
// without escapes ("...") into the literal's value and what follows.
func cutLiteral(expr string) (value, rest string, ok bool) {
	if !strings.HasPrefix(expr, `"`) {
		return "", "", false
	}
	end := strings.IndexByte(expr[1:], '"')
	if end < 0 || strings.ContainsRune(expr[1:1+end], '\\') {
		return "", "", false
	}
	return expr[1 : 1+end], expr[2+end:], true
}

// admissionCheck checks, with --require-admission-policy, that each
// driver identity draproxy serves is confined by a copy of the
// ValidatingAdmissionPolicy its driver part ships
// (deploy/driver/admission-policy.yaml): the same policy but for its
// values, naming the identity's namespace and ServiceAccount and exactly
// the driver names draproxy binds to it, not exempting it, and bound with
// Deny. It lists the policies and bindings with draproxy's own
// credentials (list validatingadmissionpolicies and
// validatingadmissionpolicybindings: deploy/admission-policy-check.yaml).
// draproxy's own mode does not depend on it.
type admissionCheck struct {
	objects *objects
	drivers *drivers
	shipped *admissionregistrationv1.ValidatingAdmissionPolicy

	// verified is 1 while the last check found every identity confined,
	// 0 otherwise (draproxy_admission_policy_verified).
	verified prometheus.Gauge
}

// newAdmissionCheck returns the check of the identities of d. Register
// its Collector to serve its metric.
func newAdmissionCheck(o *objects, d *drivers) (*admissionCheck, error) {
	shipped, _, err := shippedAdmission()
	if err != nil {
		return nil, fmt.Errorf("draproxy: %w", err)
	}
	return &admissionCheck{
		objects: o, drivers: d, shipped: shipped,
		verified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draproxy_admission_policy_verified",
			Help: "With --require-admission-policy: 1 when draproxy's last check found a ValidatingAdmissionPolicy of deploy/driver/admission-policy.yaml, bound with Deny, confining every driver identity it serves; 0 when one is missing, changed, or could not be read (the API server's second line is then missing for that driver's own token; draproxy still forwards as its node).",
		}),
	}, nil
}

// Collector is the check's metric.
func (c *admissionCheck) Collector() prometheus.Collector { return c.verified }

// check reads the policies and their bindings, and reports whether every
// identity is confined (nil), is not (an error matching
// errAdmissionPolicy, naming every problem), or could not be checked (a
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
	var pols struct {
		Kind  string                                              `json:"kind"`
		Items []admissionregistrationv1.ValidatingAdmissionPolicy `json:"items"`
	}
	var binds struct {
		Kind  string                                                     `json:"kind"`
		Items []admissionregistrationv1.ValidatingAdmissionPolicyBinding `json:"items"`
	}
	for _, l := range []struct {
		what, resource, kind string
		into                 any
		kindOf               func() string
	}{
		{"the ValidatingAdmissionPolicies", "validatingadmissionpolicies", "ValidatingAdmissionPolicyList", &pols, func() string { return pols.Kind }},
		{"the ValidatingAdmissionPolicyBindings", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBindingList", &binds, func() string { return binds.Kind }},
	} {
		data, err := c.objects.read(ctx, l.what, "/apis/admissionregistration.k8s.io/v1/"+l.resource)
		if errors.Is(err, errNotFound) {
			err = &lookupError{what: l.what, code: 404}
		}
		if err != nil {
			return err
		}
		if err := decodeJSON(data, l.into); err != nil {
			return &lookupError{what: l.what, err: err}
		}
		if k := l.kindOf(); k != l.kind {
			return &lookupError{what: l.what, err: fmt.Errorf("the answer is a %q, not a %s", k, l.kind)}
		}
	}
	var problems []string
	for _, id := range c.drivers.ids {
		var found []string
		confined := false
		for i := range pols.Items {
			pol := &pols.Items[i]
			v, err := readValues(pol.Spec.Variables, c.shipped.Spec.Variables)
			if err != nil || v.namespace != id.namespace || v.serviceAccount != id.name {
				continue // not a copy of draproxy's policy, or another identity's
			}
			p := c.policyProblems(pol, v, id)
			p = append(p, c.bindingProblems(pol.Name, binds.Items)...)
			if len(p) == 0 {
				confined = true
				break
			}
			found = append(found, p...)
		}
		switch {
		case confined:
		case len(found) == 0:
			problems = append(problems, fmt.Sprintf("no ValidatingAdmissionPolicy of deploy/driver/admission-policy.yaml names %s, which draproxy serves (--driver): apply its driver part", id))
		default:
			problems = append(problems, found...)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errAdmissionPolicy, strings.Join(problems, "; "))
	}
	return nil
}

// policyProblems compares the live policy pol, whose values are v, with
// the shipped one for the identity id: what it matches, how it fails, and
// its expressions must be the shipped ones; its driver names draproxy's
// for id; id not exempt.
func (c *admissionCheck) policyProblems(pol *admissionregistrationv1.ValidatingAdmissionPolicy, v policyValues, id identity) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %q: ", pol.Name)+fmt.Sprintf(format, args...))
	}
	live, want := &pol.Spec, &c.shipped.Spec
	if live.FailurePolicy != nil && *live.FailurePolicy != admissionregistrationv1.Fail {
		add("failurePolicy is %s, not Fail: a write the policy cannot evaluate would be allowed", *live.FailurePolicy)
	}
	if live.ParamKind != nil {
		add("paramKind is %v: draproxy's policy takes no parameter", live.ParamKind)
	}
	if why := narrowed(live.MatchConstraints, want.MatchConstraints.ResourceRules); why != "" {
		add("matchConstraints %s", why)
	}
	if len(live.MatchConditions) > 0 {
		add("matchConditions narrow it")
	}
	if !slices.Equal(live.Variables[len(valueVariables):], want.Variables[len(valueVariables):]) {
		add("variables differ from draproxy's")
	}
	if !reflect.DeepEqual(live.Validations, want.Validations) {
		add("validations differ from draproxy's")
	}
	if names := c.drivers.of(id); !slices.Equal(v.drivers, names) {
		add("binds %s to the drivers %q, and draproxy to %q (--driver): they must agree", id, v.drivers, names)
	}
	if slices.Contains(v.exempt, id.name) {
		add("exempts %s", id)
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

// bindingProblems checks that a binding of binds binds the policy named
// policy with Deny, matching every request the policy does; it names the
// problems of each binding of it, or says there is none.
func (c *admissionCheck) bindingProblems(policy string, binds []admissionregistrationv1.ValidatingAdmissionPolicyBinding) []string {
	var problems []string
	for _, b := range binds {
		if b.Spec.PolicyName != policy {
			continue
		}
		var p []string
		if !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
			p = append(p, fmt.Sprintf("ValidatingAdmissionPolicyBinding %q: validationActions are %v, without Deny: the policy's refusals would not refuse", b.Name, b.Spec.ValidationActions))
		}
		if m := b.Spec.MatchResources; m != nil {
			why := selectorsNarrow(m)
			if why == "" && len(m.ResourceRules) > 0 {
				why = narrowed(m, c.shipped.Spec.MatchConstraints.ResourceRules)
			}
			if why != "" {
				p = append(p, fmt.Sprintf("ValidatingAdmissionPolicyBinding %q: matchResources %s", b.Name, why))
			}
		}
		if len(p) == 0 {
			return nil
		}
		problems = append(problems, p...)
	}
	if len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("no ValidatingAdmissionPolicyBinding binds ValidatingAdmissionPolicy %q", policy))
	}
	return problems
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

// log says what a check found: loudly when a policy is missing, changed
// or could not be read.
func (c *admissionCheck) log(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		logger.V(2).Info("draproxy: the admission policies confine every driver identity's ResourceSlice writes")
	case errors.Is(err, errAdmissionPolicy):
		logger.Error(err, "draproxy: the API server does not confine every driver's own ResourceSlice writes (draproxy still forwards as its node): apply each driver's part, deploy/driver")
	default:
		logger.Error(err, "draproxy: could not check the admission policies")
	}
}
