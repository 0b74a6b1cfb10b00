package a2aagent

// PublicAddr exposes publicAddr to the tests.
var PublicAddr = publicAddr
