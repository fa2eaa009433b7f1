package review_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/review"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStepsBoundRetriesEvenPastCap: wait.Backoff zeroes Steps once Cap is
// reached; the retrier must still make exactly Steps retries, each wait
// capped.
func TestStepsBoundRetriesEvenPastCap(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := review.New("TokenReview", review.Options{Backoff: wait.Backoff{Duration: time.Second, Factor: 10, Steps: 4, Cap: 2 * time.Second}, Clock: clk, MaxInFlight: 1})
	attempts := 0
	done := make(chan error, 1)
	go func() {
		done <- r.Do(context.Background(), nil, func(context.Context) error {
			attempts++
			return apierrors.NewInternalError(errors.New("boom"))
		})
	}()
	start := clk.Now()
	for {
		select {
		case err := <-done:
			var re *reviewauth.ReviewError
			if !errors.As(err, &re) || re.Attempts != 5 || attempts != 5 {
				t.Fatalf("Do() = %v after %d attempts; want a ReviewError after 5 (1 + Steps)", err, attempts)
			}
			// Waits 1s, then 2s (10s capped) three times: 7s in all.
			if total := clk.Since(start); total < 7*time.Second || total > 7*time.Second+100*time.Millisecond {
				t.Fatalf("total wait = %v; want 7s (each wait capped at 2s)", total)
			}
			return
		default:
		}
		if clk.HasWaiters() {
			clk.Step(100 * time.Millisecond)
		}
		runtime.Gosched()
	}
}

func TestSuccessIsCode201(t *testing.T) {
	var codes []int
	r := review.New("SubjectAccessReview", review.Options{Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 1}, MaxInFlight: 1,
		Observer: review.Observer{Attempt: func(_ string, code int, _ time.Duration) { codes = append(codes, code) }}})
	calls := 0
	err := r.Do(context.Background(), nil, func(context.Context) error {
		calls++
		if calls == 1 {
			return apierrors.NewTooManyRequests("slow down", 0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) != 2 || codes[0] != 429 || codes[1] != 201 {
		t.Fatalf("attempt codes = %v; want [429 201]", codes)
	}
}
