package authn

// JWTExpiry exposes jwtExpiry to the external tests and fuzz target.
var JWTExpiry = jwtExpiry
