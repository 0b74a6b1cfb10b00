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
	if ev.digestIs(formulaLegacy, strings.TrimPrefix(withMeta, digestMark)) {
		t.Fatal("the older formula without Metadata gives the digest of the formula with it")
	}
}

// A claim of the release before this one holds a digest of the payload as it was decoded (marked
// v2:, or bare): a redelivery of its event still matches it, although this release digests the
// canonical form, and a changed payload does not.
func TestAClaimOfTheFormerFormulaStillMatchesItsRedelivery(t *testing.T) {
	ev := Event{Principal: "alice", Source: SourceA2A, Identity: "m1",
		Message: Message{ID: "m1", Role: RoleUser, Parts: []Part{{Data: []byte(`{"b":1.0,"a":"caf\u00e9"}`)}},
			Metadata: map[string]any{}, Extensions: []string{}}}
	v2, err := ev.digestOf(formulaV2)
	if err != nil {
		t.Fatal(err)
	}
	dg, err := ev.digest()
	if err != nil {
		t.Fatal(err)
	}
	if dg == digestMark+v2 {
		t.Fatal("the canonical form digests as the decoded one: the test's payload has nothing to canonicalize")
	}
	for _, stored := range []string{digestMarkV2 + v2, v2} {
		if !ev.matchesDigest(stored, dg) {
			t.Errorf("the former formula's claim %q does not match its event's redelivery", stored)
		}
	}
	changed := ev
	changed.Message.Parts = []Part{{Data: []byte(`{"b":2,"a":"caf\u00e9"}`)}}
	cdg, err := changed.digest()
	if err != nil {
		t.Fatal(err)
	}
	for _, stored := range []string{digestMarkV2 + v2, v2, dg} {
		if changed.matchesDigest(stored, cdg) {
			t.Errorf("a changed payload matches the claim %q", stored)
		}
	}
}

// canonicalNumber writes one form for each exact decimal value: numbers a double cannot tell
// apart stay apart, and every spelling of one value is one.
func TestCanonicalNumberIsOneFormPerExactValue(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "0.000": "0", "0e5": "0", "1": "1", "1.0": "1", "1e0": "1", "10e-1": "1",
		"100": "1e2", "1E+2": "1e2", "12.5": "125e-1", "1.25e1": "125e-1", "-0.0125e3": "-125e-1",
		"9007199254740993": "9007199254740993", "9007199254740992": "9007199254740992",
		"12345678901234567890": "1234567890123456789e1", "1e99999999999999999999": "1e99999999999999999999",
		"1e2000000000": "1e2000000000", "1.5e1073741824": "15e1073741823",
	} {
		if got := canonicalNumber(in); string(got) != want {
			t.Errorf("canonicalNumber(%s) = %s, want %s", in, got, want)
		}
	}
	for s, want := range map[string]bool{`"a"`: false, `"caf\u00e9"`: false, `"\ud800"`: true, `"\uDBFF"`: true,
		`{"a":"x\u0041\udc00"}`: true, `"\u"`: false, `"\ue000"`: false, `"\uD83D\uDE00"`: false,
		`{"\ud83d\ude00":"\ud83d"}`: true, `"\uD83D\u0041"`: true, `"\uDE00\uD83D"`: true, `"\\uD800"`: false,
		`"\\\uD800"`: true} {
		if got := hasLoneSurrogateEscape([]byte(s)); got != want {
			t.Errorf("hasLoneSurrogateEscape(%s) = %v, want %v", s, got, want)
		}
	}
}

// BenchmarkDigest compares the former formula with the canonical one on a chat message with
// metadata (strings only: the canonical form then copies nothing but the parts).
func BenchmarkDigest(b *testing.B) {
	ev := Event{Principal: "bench", Source: "bench", Identity: "ev-1", ConversationKey: "c1", ReplyTo: "r",
		Message: Message{ID: "m1", Role: RoleUser, Parts: []Part{TextPart("hello there, this is a chat message of some length that is typical")},
			Metadata: map[string]any{"slack": map[string]any{"ts": "1.3", "channel": "C1", "user": "U1", "team": "T1"}}},
		Metadata: map[string]any{"k": "v"}}
	for _, f := range []struct {
		name string
		f    digestFormula
	}{{"v2", formulaV2}, {"canonical", formulaCanonical}} {
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := ev.digestOf(f.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
