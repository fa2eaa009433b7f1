package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	policyPath  = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/" + DefaultAdmissionPolicy
	bindingPath = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/" + DefaultAdmissionPolicy
	paramPath   = "/api/v1/namespaces/dra-system/configmaps/driver-identity-dra-other"
)

// TestShippedAdmission: deploy/admission-policy.yaml is a policy of
// ResourceSlice writes that fails closed, matched by the driver
// identities in its parameters, and a binding that denies. Its
// expressions are single lines: kustomize (kubectl apply -k) writes a
// folded scalar with more-indented lines back with an extra line break,
// and the policy it stored would then differ from draproxy's, which
// draproxy refuses.
func TestShippedAdmission(t *testing.T) {
	t.Parallel()
	pol, bind, err := shippedAdmission()
	if err != nil {
		t.Fatal(err)
	}
	s := pol.Spec
	want := admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceslices"}},
	}}
	switch {
	case s.FailurePolicy == nil || *s.FailurePolicy != admissionregistrationv1.Fail:
		t.Errorf("failurePolicy = %v; want Fail", s.FailurePolicy)
	case s.ParamKind == nil || s.ParamKind.Kind != "ConfigMap" || s.ParamKind.APIVersion != "v1":
		t.Errorf("paramKind = %v; want v1 ConfigMap", s.ParamKind)
	case narrowed(s.MatchConstraints, []admissionregistrationv1.NamedRuleWithOperations{want}) != "":
		t.Errorf("matchConstraints %v do not cover every ResourceSlice write", s.MatchConstraints)
	case len(s.MatchConditions) != 1 || !strings.Contains(s.MatchConditions[0].Expression, "params.data.serviceAccount"):
		t.Errorf("matchConditions = %v; want the parameter's ServiceAccount", s.MatchConditions)
	case len(s.Validations) != 5:
		t.Errorf("%d validations; want 5", len(s.Validations))
	case bind.Spec.PolicyName != pol.Name || !slices.Equal(bind.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}):
		t.Errorf("binding %v; want Deny of %s", bind.Spec, pol.Name)
	case bind.Spec.ParamRef == nil || bind.Spec.ParamRef.Selector == nil || bind.Spec.ParamRef.Selector.MatchLabels[identityLabel] != "true":
		t.Errorf("binding paramRef %v; want the %s label", bind.Spec.ParamRef, identityLabel)
	}
	var exprs []string
	for _, m := range s.MatchConditions {
		exprs = append(exprs, m.Expression)
	}
	for _, v := range s.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, v := range s.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, e := range exprs {
		if strings.Contains(e, "\n") {
			t.Errorf("expression %q spans lines; want one line", e)
		}
	}
}

// TestAdmissionCheck: the check finds the policy in place only when the
// policy, the binding and the parameters mean what they should, names
// each problem otherwise, and says "could not check" (not "missing") when
// it cannot read them. The metric follows.
func TestAdmissionCheck(t *testing.T) {
	t.Parallel()
	edit := func(path string, change func(obj map[string]any)) func(f *fakeAPI) {
		return func(f *fakeAPI) {
			obj := f.get(path)
			change(obj)
			f.put(path, obj)
		}
	}
	spec := func(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }
	tests := []struct {
		name   string
		change func(f *fakeAPI)
		want   string // "" verified; "unavailable" could not check; else a problem
	}{
		{name: "in place"},
		{name: "policy missing", change: func(f *fakeAPI) { f.remove(policyPath) }, want: `ValidatingAdmissionPolicy "draproxy-resourceslices" does not exist`},
		{name: "binding missing", change: func(f *fakeAPI) { f.remove(bindingPath) }, want: `ValidatingAdmissionPolicyBinding "draproxy-resourceslices" does not exist`},
		{name: "failurePolicy Ignore", change: edit(policyPath, func(o map[string]any) { spec(o)["failurePolicy"] = "Ignore" }), want: "failurePolicy is Ignore"},
		{name: "a validation dropped", change: edit(policyPath, func(o map[string]any) {
			v := spec(o)["validations"].([]any)
			spec(o)["validations"] = v[1:]
		}), want: "validations differ"},
		{name: "match condition changed", change: edit(policyPath, func(o map[string]any) {
			spec(o)["matchConditions"] = []any{map[string]any{"name": "listed-driver-identity", "expression": `request.userInfo.username == "system:serviceaccount:x:y"`}}
		}), want: "matchConditions differ"},
		{name: "variables changed", change: edit(policyPath, func(o map[string]any) { spec(o)["variables"] = []any{} }), want: "variables differ"},
		{name: "paramKind changed", change: edit(policyPath, func(o map[string]any) { spec(o)["paramKind"] = map[string]any{"apiVersion": "v1", "kind": "Secret"} }), want: "paramKind"},
		{name: "only creates", change: edit(policyPath, func(o map[string]any) {
			r := spec(o)["matchConstraints"].(map[string]any)["resourceRules"].([]any)[0].(map[string]any)
			r["operations"] = []any{"CREATE"}
		}), want: "do not cover"},
		{name: "object selector", change: edit(policyPath, func(o map[string]any) {
			spec(o)["matchConstraints"].(map[string]any)["objectSelector"] = map[string]any{"matchLabels": map[string]any{"never": "set"}}
		}), want: "select objects"},
		{name: "excluded", change: edit(policyPath, func(o map[string]any) {
			spec(o)["matchConstraints"].(map[string]any)["excludeResourceRules"] = []any{map[string]any{"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "resources": []any{"*"}, "operations": []any{"*"}}}
		}), want: "exclude"},
		{name: "defaults the API server adds", change: edit(policyPath, func(o map[string]any) {
			m := spec(o)["matchConstraints"].(map[string]any)
			m["matchPolicy"], m["namespaceSelector"], m["objectSelector"] = "Equivalent", map[string]any{}, map[string]any{}
			m["resourceRules"].([]any)[0].(map[string]any)["scope"] = "*"
		})},
		{name: "type checking warnings", change: edit(policyPath, func(o map[string]any) {
			o["metadata"].(map[string]any)["generation"] = 2
			o["status"] = map[string]any{"observedGeneration": 2, "typeChecking": map[string]any{"expressionWarnings": []any{map[string]any{"fieldRef": "spec.validations[0].expression", "warning": "no such key"}}}}
		}), want: "type checking of spec.validations[0].expression: no such key"},
		{name: "type checking of an older generation", change: edit(policyPath, func(o map[string]any) {
			o["metadata"].(map[string]any)["generation"] = 3
			o["status"] = map[string]any{"observedGeneration": 2, "typeChecking": map[string]any{"expressionWarnings": []any{map[string]any{"fieldRef": "x", "warning": "y"}}}}
		})},
		{name: "binding warns only", change: edit(bindingPath, func(o map[string]any) { spec(o)["validationActions"] = []any{"Warn", "Audit"} }), want: "without Deny"},
		{name: "binding denies and audits", change: edit(bindingPath, func(o map[string]any) { spec(o)["validationActions"] = []any{"Deny", "Audit"} })},
		{name: "binding of another policy", change: edit(bindingPath, func(o map[string]any) { spec(o)["policyName"] = "other" }), want: `binds policy "other"`},
		{name: "binding narrowed", change: edit(bindingPath, func(o map[string]any) {
			spec(o)["matchResources"] = map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"x": "y"}}}
		}), want: "matchResources select namespaces"},
		{name: "binding without parameters", change: edit(bindingPath, func(o map[string]any) { delete(spec(o), "paramRef") }), want: "has no paramRef"},
		{name: "parameters elsewhere", change: edit(bindingPath, func(o map[string]any) { spec(o)["paramRef"].(map[string]any)["namespace"] = "elsewhere" }), want: "no parameter"},
		{name: "an identity not listed", change: func(f *fakeAPI) { f.remove(paramPath) }, want: "lists dra/other"},
		{name: "other drivers listed", change: edit(paramPath, func(o map[string]any) { o["data"].(map[string]any)["drivers"] = "other.example.com, extra.example.com" }), want: "they must agree"},
		{name: "drivers said with spaces", change: edit(paramPath, func(o map[string]any) { o["data"].(map[string]any)["drivers"] = " other.example.com ,," })},
		{name: "a parameter without drivers", change: edit(paramPath, func(o map[string]any) { delete(o["data"].(map[string]any), "drivers") }), want: "no drivers"},
		{name: "a parameter without serviceAccount", change: edit(paramPath, func(o map[string]any) { delete(o["data"].(map[string]any), "serviceAccount") }), want: "no serviceAccount"},
		{name: "the policy's answer is a Status", change: func(f *fakeAPI) {
			f.put(policyPath, map[string]any{"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 200})
		}, want: "unavailable"},
		{name: "the binding's answer is the policy", change: func(f *fakeAPI) { f.put(bindingPath, f.get(policyPath)) }, want: "unavailable"},
		{name: "outage", change: func(f *fakeAPI) { f.fail.Store(http.StatusServiceUnavailable) }, want: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeAPI(t)
			f.installAdmission(t, testIdentities)
			if tt.change != nil {
				tt.change(f)
			}
			c := must(newAdmissionCheckFor(f.config(), &config{admissionPolicy: DefaultAdmissionPolicy, admissionBinding: DefaultAdmissionPolicy, drivers: testDrivers()}))
			err := c.check(t.Context())
			var le *lookupError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check = %v; want nil", err)
			case tt.want == "unavailable" && !errors.As(err, &le):
				t.Errorf("check = %v; want a *lookupError", err)
			case tt.want != "" && tt.want != "unavailable" && (!errors.Is(err, errAdmissionPolicy) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check = %v; want errAdmissionPolicy naming %q", err, tt.want)
			}
			if got, want := testutil.ToFloat64(c.verified), map[bool]float64{true: 1, false: 0}[err == nil]; got != want {
				t.Errorf("draproxy_admission_policy_verified = %v; want %v", got, want)
			}
		})
	}
}

// TestAdmissionCheckRun: after the check at start, the policy is checked
// every interval, on the injected clock, until the context ends; a policy
// that goes is logged and measured at the next check.
func TestAdmissionCheckRun(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.installAdmission(t, testIdentities)
	c := must(newAdmissionCheckFor(f.config(), &config{admissionPolicy: DefaultAdmissionPolicy, admissionBinding: DefaultAdmissionPolicy, drivers: testDrivers()}))
	clk := clocktesting.NewFakeClock(time.Now())
	var mu sync.Mutex
	var logged []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	results := make(chan error)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.run(ctx, clk, time.Minute, time.Minute, func(err error) { results <- err })
	}()
	next := func() error {
		t.Helper()
		// The loop waits on the clock: step it by the interval once it does.
		for !clk.HasWaiters() {
			select {
			case <-stopped:
				t.Fatal("the loop stopped")
			default:
				runtime.Gosched()
			}
		}
		clk.Step(time.Minute - 1)
		select {
		case err := <-results:
			t.Fatalf("a check 1ns before the interval: %v", err)
		default:
		}
		clk.Step(1)
		return <-results
	}
	if err := next(); err != nil {
		t.Errorf("first periodic check = %v; want nil", err)
	}
	f.remove(policyPath)
	if err := next(); !errors.Is(err, errAdmissionPolicy) {
		t.Errorf("check after the policy went = %v; want errAdmissionPolicy", err)
	}
	if got := testutil.ToFloat64(c.verified); got != 0 {
		t.Errorf("draproxy_admission_policy_verified = %v; want 0", got)
	}
	mu.Lock()
	found := slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "does not exist") })
	mu.Unlock()
	if !found {
		t.Errorf("logged %q; want the missing policy named", logged)
	}
	f.installAdmission(t, testIdentities)
	if err := next(); err != nil {
		t.Errorf("check after the policy came back = %v; want nil", err)
	}
	cancel()
	<-stopped // the loop ends with its context
}

// TestRunRequiresAdmission: draproxy does not start without the admission
// policy unless told to, and then says so in its metric.
func TestRunRequiresAdmission(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	sock := filepath.Join(shortDir(t), "d.sock")
	err := run(t.Context(), append(runArgs(t, f), "--socket="+sock), io.Discard)
	if !errors.Is(err, errAdmissionPolicy) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--require-admission-policy=false") {
		t.Errorf("run() without the policy = %v; want errAdmissionPolicy naming it and the flag", err)
	}
	f.fail.Store(http.StatusServiceUnavailable)
	err = run(t.Context(), append(runArgs(t, f), "--socket="+sock), io.Discard)
	if le := (*lookupError)(nil); !errors.As(err, &le) {
		t.Errorf("run() while the API server is down = %v; want could not check", err)
	}
	f.fail.Store(0)

	out, _ := startRunAs(t, f, "--socket="+sock, "--require-admission-policy=false", "--metrics-listen=127.0.0.1:0")
	_, addr, _ := strings.Cut(out.String(), "metrics on ")
	addr, _, _ = strings.Cut(addr, "\n")
	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "\ndraproxy_admission_policy_verified 0\n") {
		t.Errorf("metrics without the policy:\n%s\nwant draproxy_admission_policy_verified 0", b)
	}
}
