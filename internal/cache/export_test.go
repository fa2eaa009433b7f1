package cache

// Waiters reports how many callers wait on the load for k (0 if none). Tests
// use it to synchronise without sleeping.
func Waiters[V any](g *Group[V], k Key) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[k]; ok {
		return c.waiters
	}
	return 0
}

// Group returns the Group a Holder shares its fetches through.
func (h *Holder[V]) Group() *Group[struct{}] { return &h.group }

// NewKeyerPRF returns a Keyer for prf ([PRFSHA256] or [PRFBLAKE2b]) with
// secret (64 bytes), whatever PRF the process chose: tests cover both.
func NewKeyerPRF(prf string, secret []byte) *Keyer { return newKeyer(prf, secret) }

// ChoosePRF runs the measurement behind PRF again.
var ChoosePRF = choosePRF

// MaxRememberedAudiences is the bound on the audience sets a Keyer keeps a
// BLAKE2b TokenKeyer for.
const MaxRememberedAudiences = maxRememberedAudiences
