package a2aagent

// AllowedAddr exposes allowedAddr to the tests.
var AllowedAddr = allowedAddr
