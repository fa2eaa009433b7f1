package httpauth

// SetIdentityHeaders exposes setIdentityHeaders to FuzzIdentityHeaders.
var SetIdentityHeaders = setIdentityHeaders
