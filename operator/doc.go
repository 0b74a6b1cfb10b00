// Package operator is the operator surface of a Channels server (docs/operations.md): Prometheus
// metrics, live source health behind /readyz, the per-source summary, the evidence API and the
// /admin dashboard.
//
// A server builds one Metrics and wraps its store and executor with it, so every counter counts
// what was durably committed; it tracks its configured sources with a Health; and it mounts
// Handler, which serves /healthz, /readyz, /metrics, /admin and /admin/api/… in front of the A2A
// bindings. The CLI (channels evidence, channels evidence --summary) reads the same Summary and
// EvidenceView straight from the store.
//
// Everything shown is evidence detail, counts and ids: never a message body or a secret.
package operator
