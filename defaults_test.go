package reviewauth_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/serving"
)

// flagDefaults pairs every flag that has a default with the constant that
// states it. Defaults are stated once, as constants in code; the flags'
// help text and every document that names a default must agree with them.
// To check another document, add it to documentsStatingDefaults; README.md
// is checked row by row in TestREADMEStatesTheDefaults.
var flagDefaults = []struct {
	flag  string
	value any // the constant: time.Duration, int, float64 or []string
}{
	{"authentication-token-webhook-cache-ttl", authn.DefaultSuccessTTL},
	{"authentication-token-webhook-cache-failure-ttl", authn.DefaultFailureTTL},
	{"authentication-max-in-flight", authn.DefaultMaxInFlight},
	{"authentication-qps", float64(reviewauth.DefaultQPS)},
	{"authentication-burst", reviewauth.DefaultBurst},
	{"authorization-webhook-cache-authorized-ttl", authz.DefaultAllowedTTL},
	{"authorization-webhook-cache-unauthorized-ttl", authz.DefaultDeniedTTL},
	{"authorization-max-in-flight", authz.DefaultMaxInFlight},
	{"authorization-qps", float64(reviewauth.DefaultQPS)},
	{"authorization-burst", reviewauth.DefaultBurst},
	{"authorization-cache-ignored-extras", []string{authz.CredentialIDExtra}},
}

// documentsStatingDefaults are files whose lines naming a flag of
// flagDefaults state its default, in human form (see human): the flag
// tables in the AddFlags doc comments.
var documentsStatingDefaults = []string{"authn/flags.go", "authz/flags.go"}

// defaultFlags registers the flags of authn.Flags and authz.Flags.
func defaultFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	var an authn.Flags
	var az authz.Flags
	an.AddFlags(fs)
	az.AddFlags(fs)
	return fs
}

// human is how a document states v: durations without zero units ("1m",
// "10s"), numbers as integers where they are, lists by the last path
// segment of each element ("credential-id").
func human(v any) []string {
	switch v := v.(type) {
	case time.Duration:
		switch {
		case v%time.Hour == 0:
			return []string{fmt.Sprintf("%dh", v/time.Hour)}
		case v%time.Minute == 0:
			return []string{fmt.Sprintf("%dm", v/time.Minute)}
		}
		return []string{v.String()}
	case float64:
		return []string{strconv.FormatFloat(v, 'f', -1, 64)}
	case int:
		return []string{strconv.Itoa(v)}
	case []string:
		var out []string
		for _, s := range v {
			out = append(out, s[strings.LastIndex(s, "/")+1:])
		}
		return out
	}
	panic(fmt.Sprintf("human: %T", v))
}

// TestFlagDefaultsAgreeWithConstants checks each flag's default, and the
// "(default ...)" its help text shows, against its constant.
func TestFlagDefaultsAgreeWithConstants(t *testing.T) {
	t.Parallel()
	fs := defaultFlags()
	usages := fs.FlagUsages()
	for _, d := range flagDefaults {
		f := fs.Lookup(d.flag)
		if f == nil {
			t.Errorf("--%s: not registered", d.flag)
			continue
		}
		var want string
		switch v := d.value.(type) {
		case time.Duration:
			want = v.String()
		case []string:
			want = "[" + strings.Join(v, ",") + "]"
		default:
			want = fmt.Sprint(v)
		}
		if f.DefValue != want {
			t.Errorf("--%s default = %q; want %q, the constant's", d.flag, f.DefValue, want)
		}
		var line string
		for _, l := range strings.Split(usages, "\n") {
			if strings.Contains(l, "--"+d.flag+" ") {
				line = l
			}
		}
		if !strings.Contains(line, "(default "+want+")") {
			t.Errorf("--%s help text %q does not show (default %s)", d.flag, line, want)
		}
	}
}

// TestDocumentsStateTheDefaults checks, in every document of
// documentsStatingDefaults, that each line naming a flag of flagDefaults
// states that flag's default as its constant has it.
func TestDocumentsStateTheDefaults(t *testing.T) {
	t.Parallel()
	for _, doc := range documentsStatingDefaults {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range flagDefaults {
			named := 0
			for _, line := range strings.Split(string(raw), "\n") {
				if !strings.Contains(line, "--"+d.flag+" ") && !strings.Contains(line, "--"+d.flag+",") || !strings.Contains(line, "default") {
					continue
				}
				named++
				for _, h := range human(d.value) {
					if !strings.Contains(line, h) {
						t.Errorf("%s: %q states a default for --%s without %q, its constant", doc, strings.TrimSpace(line), d.flag, h)
					}
				}
			}
			if named == 0 && strings.HasPrefix(d.flag, map[string]string{"authn/flags.go": "authentication-", "authz/flags.go": "authorization-"}[doc]) {
				t.Errorf("%s: no line states the default of --%s", doc, d.flag)
			}
		}
	}
}

// readmeDefaults are the rows of README.md's "Defaults, and why" tables
// that state a library default, with what the Default column must say,
// made from the constants. A row that changes its wording, or a constant
// that changes its value, fails TestREADMEStatesTheDefaults until the two
// agree again.
var readmeDefaults = []struct {
	setting string // the Setting column, as written
	want    string // the Default column must contain it
}{
	{"Identity cache TTL", human(authn.DefaultSuccessTTL)[0] + ", never past `exp`"},
	{"Rejection cache TTL", human(authn.DefaultFailureTTL)[0] + ", separate cache"},
	{"Allow / Deny cache TTL", human(authz.DefaultAllowedTTL)[0] + " / " + human(authz.DefaultDeniedTTL)[0]},
	{"Cache size", fmt.Sprintf("%d identities + %d rejections; %d decisions", authn.DefaultMaxEntries, authn.DefaultMaxEntries, authz.DefaultMaxEntries)},
	{"Max token size", fmt.Sprintf("%d KiB", authn.DefaultMaxTokenSize>>10)},
	{"Reviews in flight", fmt.Sprintf("%d per kind", authn.DefaultMaxInFlight)},
	{"Client QPS / burst", fmt.Sprintf("%d / %d", int(reviewauth.DefaultQPS), reviewauth.DefaultBurst)},
	{"Per-attempt timeout", fmt.Sprintf("%d s", authn.DefaultAttemptTimeout/time.Second)},
	{"Answer size", fmt.Sprintf("%d KiB past the review sent", reviewauth.MaxAnswerBytes>>10)},
	{"SAR cache key", "`" + authz.CredentialIDExtra + "`"},
	{"Connections per server", fmt.Sprintf("at %d KiB a connection", serving.ConnectionMemory>>10)},
	{"Past the budget", fmt.Sprintf("in the last %d s", serving.DefaultProgressWindow/time.Second)},
	{"HTTP/2 rapid reset", fmt.Sprintf("%d streams reset, then %d/s", serving.DefaultRapidResetLimit, serving.DefaultRapidResetRate)},
	{"Connections per server", fmt.Sprintf("%s in a container with 128 MiB", thousands(serving.BudgetFor(1<<20, 128<<20)))},
	{"Connections per server", fmt.Sprintf("%s on this 2-core machine (20,000 files, 24 GiB)", thousands(serving.BudgetFor(20000, 24<<30)))},
}

// thousands spells n with a comma between thousands, as the README does.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestREADMEStatesTheDefaults checks the Default column of README.md's
// rows named in readmeDefaults against the constants, and that the same
// constants stand behind authn's and authz's.
func TestREADMEStatesTheDefaults(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) >= 4 && strings.HasPrefix(line, "| ") {
			rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
		}
	}
	for _, d := range readmeDefaults {
		got, ok := rows[d.setting]
		switch {
		case !ok:
			t.Errorf("README.md has no row %q in its defaults", d.setting)
		case !strings.Contains(got, d.want):
			t.Errorf("README.md row %q says %q; want it to say %q, its constants", d.setting, got, d.want)
		}
	}
	if authn.DefaultMaxInFlight != authz.DefaultMaxInFlight || authn.DefaultAttemptTimeout != authz.DefaultAttemptTimeout {
		t.Errorf("authn and authz differ in in-flight bound or attempt timeout; the README states one for both")
	}
}
