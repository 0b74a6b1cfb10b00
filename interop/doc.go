// Package interop holds the tests that drive a real "channels serve" process with independent
// A2A clients: the official Go SDK (a2a-go v2.4.0) over both bindings, and @a2a-js/sdk 1.3.0
// through the node script in interop/js.
//
// The tests build the binary once (go build ./cmd/channels), start it on a free loopback port
// with the conformance executor, a credentials file of two principals and a SQLite store (and,
// when TEST_DATABASE_URL is set, a Postgres store in a schema of its own), and read the bound
// address from the "channels serving" log line. Nothing here is linked into the binary.
//
// TestAcknowledgedWorkSurvivesKillsAndRestarts, the chaos soak, runs only with TEST_SOAK set
// to the length of its load (docs/architecture.md, "The chaos soak").
package interop
