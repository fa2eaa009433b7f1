package review

import "context"

// Enqueue adds a waiter for ctx as Acquire does when no slot is free, without
// waiting, so that tests drive the queue one Release at a time: granted
// reports whether a Release handed the waiter a slot, leave takes it out of
// the queue as a caller whose context ends (a no-op once granted).
func (q *Queue) Enqueue(ctx context.Context) (granted func() bool, leave func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.enqueue(ctx)
	granted = func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return w.granted
	}
	left := false
	leave = func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if !w.granted && !left {
			q.remove(w)
			left = true
		}
	}
	return granted, leave
}

// TurnsWaiting is the number of requests waiting for their turn at c's
// rate limiter.
func TurnsWaiting(c *Client) int { return c.turn.Waiting() }
