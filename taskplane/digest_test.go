package taskplane

import (
	"strings"
	"testing"
)

// The claims of earlier releases hold digests of the older formula: an event without Metadata
// must digest exactly as it did (the value below is the older release's), and one with Metadata
// is recognised under the older formula by legacyMatch.
func TestTheDigestOfAnEventWithoutMetadataIsUnchanged(t *testing.T) {
	ev := Event{Principal: "alice", Source: "slack", Identity: "T1:Ev1", ConversationKey: "T1/C1/1.2", ReplyTo: "C1:1.3",
		Message: Message{ID: "slack:T1:Ev1", Role: RoleUser, Parts: []Part{TextPart("deploy")}, Metadata: map[string]any{"slack": map[string]any{"ts": "1.3"}}}}
	got, err := ev.digest()
	if err != nil {
		t.Fatal(err)
	}
	// The older releases' digest of this event: bare hex, the same under both older formulas.
	const old = "3539a3192d5f2664f1febd55b044e623789165c688608dc4cddfbd68f3846617"
	if want := digestMark + old; got != want {
		t.Fatalf("digest of an event without Metadata = %s, want %s (the older releases' under the mark)", got, want)
	}
	if !ev.matchesDigest(old, got) || !ev.matchesDigest(got, got) {
		t.Fatal("the event does not match its own digest, or the older releases' claim of it")
	}
	// A changed payload under the same identity does not match the older releases' claim.
	changed := ev
	changed.Message.Parts = []Part{TextPart("rollback")}
	changedDigest, err := changed.digest()
	if err != nil {
		t.Fatal(err)
	}
	if changed.matchesDigest(old, changedDigest) {
		t.Fatal("a changed payload matches the older releases' claim of the event")
	}
	ev.Metadata = map[string]any{"k": "v"}
	withMeta, err := ev.digest()
	if err != nil {
		t.Fatal(err)
	}
	if withMeta == got {
		t.Fatal("the event's Metadata is not covered by its digest")
	}
	// A claim this release recorded without Metadata: a retry that adds some is another payload.
	if ev.matchesDigest(got, withMeta) {
		t.Fatal("a retry that adds Metadata matches this release's claim of the event without it")
	}
	// Claims of older releases still deduplicate the event's redeliveries: the release that
	// covered Metadata without the mark, and the one before that, which left it out.
	if !ev.matchesDigest(strings.TrimPrefix(withMeta, digestMark), withMeta) || !ev.matchesDigest(old, withMeta) {
		t.Fatal("an older release's claim of the event does not match it")
	}
	if ev.legacyMatch(withMeta) {
		t.Fatal("legacyMatch takes the new formula's digest for the older one")
	}
	ev.Metadata = nil
	if ev.legacyMatch(old) {
		t.Fatal("legacyMatch matched an event without Metadata (both formulas agree; the plain comparison decides)")
	}
}
