package taskplane

import "testing"

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
	if want := "3539a3192d5f2664f1febd55b044e623789165c688608dc4cddfbd68f3846617"; got != want {
		t.Fatalf("digest of an event without Metadata = %s, want %s (the older release's)", got, want)
	}
	old := got
	ev.Metadata = map[string]any{"k": "v"}
	withMeta, err := ev.digest()
	if err != nil {
		t.Fatal(err)
	}
	if withMeta == old {
		t.Fatal("the event's Metadata is not covered by its digest")
	}
	if !ev.legacyMatch(old) || ev.legacyMatch(withMeta) {
		t.Fatal("legacyMatch does not recognise the older formula's digest, or takes the new one for it")
	}
	ev.Metadata = nil
	if ev.legacyMatch(old) {
		t.Fatal("legacyMatch matched an event without Metadata (both formulas agree; the plain comparison decides)")
	}
}
