package cache

// CollideLookupKeys makes every request share one lookup key in a, so that
// tests can check that a hit compares the full encoding.
func CollideLookupKeys(a *Authorizer) { a.collide = true }
