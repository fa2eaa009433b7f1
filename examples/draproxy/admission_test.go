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

// The admission policy and binding of the dra/other identity, as
// installAdmission stores them.
var (
	policyPath  = policiesPath + "/draproxy-resourceslices-dra-other"
	bindingPath = bindingsPath + "/draproxy-resourceslices-dra-other"
)

// TestShippedAdmission: deploy/driver/admission-policy.yaml is a policy of
// ResourceSlice writes that fails closed, takes no parameter and is not
// narrowed by match conditions, with its values (the driver's namespace,
// ServiceAccount, driver names, exemptions) first, and a binding that
// denies. Its expressions are single lines: kustomize (kubectl apply -k)
// writes a folded scalar with more-indented lines back with an extra line
// break, and the policy it stored would then differ from draproxy's,
// which draproxy refuses.
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
	v, err := readValues(s.Variables, s.Variables)
	switch {
	case s.FailurePolicy == nil || *s.FailurePolicy != admissionregistrationv1.Fail:
		t.Errorf("failurePolicy = %v; want Fail", s.FailurePolicy)
	case s.ParamKind != nil:
		t.Errorf("paramKind = %v; want none: nothing outside the policy may change what it confines", s.ParamKind)
	case narrowed(s.MatchConstraints, []admissionregistrationv1.NamedRuleWithOperations{want}) != "":
		t.Errorf("matchConstraints %v do not cover every ResourceSlice write", s.MatchConstraints)
	case len(s.MatchConditions) != 0:
		t.Errorf("matchConditions = %v; want none", s.MatchConditions)
	case len(s.Validations) != 5:
		t.Errorf("%d validations; want 5", len(s.Validations))
	case err != nil || v.namespace != "gpu-driver" || v.serviceAccount != "kubelet-plugin" || !slices.Equal(v.drivers, []string{"gpu.example.com"}) || len(v.exempt) != 0:
		t.Errorf("the values = %+v, %v; want gpu-driver/kubelet-plugin publishing gpu.example.com, none exempt", v, err)
	case bind.Spec.PolicyName != pol.Name || !slices.Equal(bind.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) || bind.Spec.ParamRef != nil:
		t.Errorf("binding %v; want Deny of %s, without parameters", bind.Spec, pol.Name)
	}
	var exprs []string
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
	for _, tt := range []struct {
		expr, value, rest string
		ok                bool
	}{
		{`"a".split(",")`, "a", `.split(",")`, true},
		{`""`, "", "", true},
		{`"a\"b"`, "", "", false},
		{`x + "a"`, "", "", false},
		{`"a`, "", "", false},
	} {
		if value, rest, ok := cutLiteral(tt.expr); value != tt.value || rest != tt.rest || ok != tt.ok {
			t.Errorf("cutLiteral(%q) = %q, %q, %v; want %q, %q, %v", tt.expr, value, rest, ok, tt.value, tt.rest, tt.ok)
		}
	}
}

// ownFor is draproxy's own reads of f.
func ownFor(t testing.TB, f *fakeAPI) *objects {
	t.Helper()
	return must(ownObjects(f.config()))
}

// TestAdmissionCheck: the check finds the identities confined only when a
// copy of the shipped policy names each, with the same driver names, not
// exempting it, bound with Deny and not narrowed; it names each problem
// otherwise, and says "could not check" (not "missing") when it cannot
// read them. The metric follows.
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
	value := func(i int, v string) func(o map[string]any) {
		return func(o map[string]any) {
			vars := spec(o)["variables"].([]any)
			e := vars[i].(map[string]any)
			_, rest, _ := cutLiteral(e["expression"].(string))
			e["expression"] = `"` + v + `"` + rest
		}
	}
	tests := []struct {
		name   string
		change func(f *fakeAPI)
		want   string // "" verified; "unavailable" could not check; else a problem
	}{
		{name: "in place"},
		{name: "policy missing", change: func(f *fakeAPI) { f.remove(policyPath) }, want: `no ValidatingAdmissionPolicy of deploy/driver/admission-policy.yaml names dra/other`},
		{name: "binding missing", change: func(f *fakeAPI) { f.remove(bindingPath) }, want: `no ValidatingAdmissionPolicyBinding binds ValidatingAdmissionPolicy "draproxy-resourceslices-dra-other"`},
		{name: "failurePolicy Ignore", change: edit(policyPath, func(o map[string]any) { spec(o)["failurePolicy"] = "Ignore" }), want: "failurePolicy is Ignore"},
		{name: "a validation dropped", change: edit(policyPath, func(o map[string]any) {
			v := spec(o)["validations"].([]any)
			spec(o)["validations"] = v[1:]
		}), want: "validations differ"},
		{name: "a match condition", change: edit(policyPath, func(o map[string]any) {
			spec(o)["matchConditions"] = []any{map[string]any{"name": "never", "expression": `request.userInfo.username == "nobody"`}}
		}), want: "matchConditions narrow it"},
		{name: "a derived variable changed", change: edit(policyPath, func(o map[string]any) {
			spec(o)["variables"].([]any)[5].(map[string]any)["expression"] = "false"
		}), want: "variables differ"},
		{name: "a value no longer a literal", change: edit(policyPath, func(o map[string]any) {
			spec(o)["variables"].([]any)[0].(map[string]any)["expression"] = `"d" + "ra"`
		}), want: "names dra/other"},
		{name: "paramKind set", change: edit(policyPath, func(o map[string]any) { spec(o)["paramKind"] = map[string]any{"apiVersion": "v1", "kind": "ConfigMap"} }), want: "paramKind"},
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
		{name: "binding of another policy", change: edit(bindingPath, func(o map[string]any) { spec(o)["policyName"] = "other" }), want: `no ValidatingAdmissionPolicyBinding binds`},
		{name: "binding narrowed", change: edit(bindingPath, func(o map[string]any) {
			spec(o)["matchResources"] = map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"x": "y"}}}
		}), want: "matchResources select namespaces"},
		{name: "other drivers listed", change: edit(policyPath, value(2, "other.example.com, extra.example.com")), want: "they must agree"},
		{name: "drivers said with spaces", change: edit(policyPath, value(2, " other.example.com ,,"))},
		{name: "the identity exempted", change: edit(policyPath, value(3, "x,other")), want: "exempts dra/other"},
		{name: "another namespace", change: edit(policyPath, value(0, "elsewhere")), want: "names dra/other"},
		{name: "another ServiceAccount", change: edit(policyPath, value(1, "driver")), want: "names dra/other"},
		{name: "a second, weakened copy", change: func(f *fakeAPI) {
			pol := f.get(policyPath)
			pol["metadata"].(map[string]any)["name"] = "weak"
			spec(pol)["failurePolicy"] = "Ignore"
			f.put(policiesPath+"/weak", pol)
		}},
		{name: "the policies' answer is a Status", change: func(f *fakeAPI) {
			f.fault.Store(ptrTo(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
				if r.URL.Path != policiesPath {
					return false
				}
				writeJSON(w, http.StatusOK, status(http.StatusOK, "all is well"))
				return true
			}))
		}, want: "unavailable"},
		{name: "outage", change: func(f *fakeAPI) { f.fail.Store(http.StatusServiceUnavailable) }, want: "unavailable"},
		{name: "no RBAC for the lists", change: func(f *fakeAPI) { f.fail.Store(http.StatusForbidden) }, want: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeAPI(t)
			f.installAdmission(t, testIdentities)
			if tt.change != nil {
				tt.change(f)
			}
			c := must(newAdmissionCheck(ownFor(t, f), testDrivers()))
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

func ptrTo[T any](v T) *T { return &v }

// TestAdmissionCheckRun: after the check at start, the policy is checked
// every interval, on the injected clock, until the context ends; a policy
// that goes is logged and measured at the next check.
func TestAdmissionCheckRun(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.installAdmission(t, testIdentities)
	c := must(newAdmissionCheck(ownFor(t, f), testDrivers()))
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
	found := slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "names dra/other") })
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

// TestRunRequiresAdmission: with --require-admission-policy draproxy does
// not start unless the admission policies confine its identities, and
// says so; without it, it starts whatever the policies (its own mode does
// not depend on them).
func TestRunRequiresAdmission(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	sock := filepath.Join(shortDir(t), "d.sock")
	err := run(t.Context(), append(runArgs(t, f), "--socket="+sock, "--require-admission-policy"), io.Discard)
	if !errors.Is(err, errAdmissionPolicy) || !strings.Contains(err.Error(), "names dra/driver") || !strings.Contains(err.Error(), "--require-admission-policy") {
		t.Errorf("run() without the policies = %v; want errAdmissionPolicy naming the identity and the flag", err)
	}
	f.fail.Store(http.StatusServiceUnavailable)
	err = run(t.Context(), append(runArgs(t, f), "--socket="+sock, "--require-admission-policy"), io.Discard)
	if le := (*lookupError)(nil); !errors.As(err, &le) {
		t.Errorf("run() while the API server is down = %v; want could not check", err)
	}
	f.fail.Store(0)

	// Without the flag: serves, without the policies.
	startRunAs(t, f, "--socket="+sock)
	// With it and the policies: serves, and says so in its metric.
	f.installAdmission(t, testIdentities)
	out, _ := startRunAs(t, f, "--socket="+filepath.Join(shortDir(t), "d.sock"), "--require-admission-policy", "--metrics-listen=127.0.0.1:0")
	_, addr, _ := strings.Cut(out.String(), "metrics on ")
	addr, _, _ = strings.Cut(addr, "\n")
	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "\ndraproxy_admission_policy_verified 1\n") {
		t.Errorf("metrics with the policies:\n%s\nwant draproxy_admission_policy_verified 1", b)
	}
}
