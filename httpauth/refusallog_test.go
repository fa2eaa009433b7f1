package httpauth_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/httpauth"
)

// lineLog collects funcr lines, safe for concurrent use.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) logger(verbosity int) klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: verbosity})
}

func (l *lineLog) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

func (l *lineLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestRefusalLogAtDefaultVerbosity (issue #12): at the default verbosity
// refusals are logged, with the user, the cleaned path and the reason, at
// most RefusalLogBurst at once and one per RefusalLogInterval after that,
// the next line counting the ones left out; outages have a budget of their
// own; allowed requests are not logged; no line holds a token. At -v=2
// every refusal is logged.
func TestRefusalLogAtDefaultVerbosity(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	mw := newMiddleware(t, httpauth.Options{Clock: clk})
	var logs lineLog
	send := func(path, token string, verbosity int) int {
		r := get(path, token)
		w, _ := serve(mw, r.WithContext(klog.NewContext(r.Context(), logs.logger(verbosity))))
		return w.Code
	}

	// Allowed requests: nothing at the default verbosity.
	for range 5 {
		if code := send("/metrics", scraperToken, 0); code != 200 {
			t.Fatalf("GET /metrics = %d; want 200", code)
		}
	}
	if s := logs.all(); s != "" {
		t.Fatalf("allowed requests logged at the default verbosity:\n%s", s)
	}

	// Refusals: the burst, then nothing until the interval has passed.
	for range httpauth.RefusalLogBurst + 5 {
		if code := send("/metrics//../logs/", scraperToken, 0); code != 403 {
			t.Fatalf("GET /logs/ = %d; want 403", code)
		}
		send("/metrics", badToken, 0)
	}
	if got := logs.count("httpauth: request "); got != httpauth.RefusalLogBurst {
		t.Fatalf("refusal lines = %d; want %d\n%s", got, httpauth.RefusalLogBurst, logs.all())
	}
	forbidden := `"user"="system:serviceaccount:monitoring:prometheus" "method"="GET" "path"="/logs/" "reason"=`
	if logs.count(`"msg"="httpauth: request forbidden"`) == 0 || logs.count(forbidden) == 0 {
		t.Errorf("no forbidden line with the user and the cleaned path %s:\n%s", forbidden, logs.all())
	}
	if logs.count(`"msg"="httpauth: request unauthenticated"`) == 0 {
		t.Errorf("no unauthenticated line:\n%s", logs.all())
	}

	// Outages have their own budget: logged despite the spent refusals.
	if code := send("/metrics", downToken, 0); code != 503 {
		t.Fatalf("outage = %d; want 503", code)
	}
	if got := logs.count(`"msg"="httpauth: authentication unavailable"`); got != 1 {
		t.Errorf("outage lines = %d; want 1\n%s", got, logs.all())
	}

	clk.SetTime(clk.Now().Add(httpauth.RefusalLogInterval - time.Nanosecond))
	send("/logs/", scraperToken, 0)
	if got := logs.count("httpauth: request "); got != httpauth.RefusalLogBurst {
		t.Fatalf("refusal lines 1ns before the interval = %d; want %d", got, httpauth.RefusalLogBurst)
	}
	clk.SetTime(clk.Now().Add(time.Nanosecond))
	send("/logs/", scraperToken, 0)
	if got := logs.count("httpauth: request "); got != httpauth.RefusalLogBurst+1 {
		t.Fatalf("refusal lines at the interval = %d; want %d", got, httpauth.RefusalLogBurst+1)
	}
	if logs.count(`"suppressed"=31`) != 1 {
		t.Errorf("the line after the pause does not count the 31 refusals left out:\n%s", logs.all())
	}

	// From -v=2, every refusal.
	before := logs.count("httpauth: request ")
	for range 30 {
		send("/logs/", scraperToken, 2)
	}
	if got := logs.count("httpauth: request ") - before; got != 30 {
		t.Errorf("refusal lines at -v=2 = %d; want 30", got)
	}
	for _, tok := range []string{scraperToken, badToken, downToken} {
		if logs.count(tok) > 0 {
			t.Errorf("the log holds a token:\n%s", logs.all())
		}
	}
}
