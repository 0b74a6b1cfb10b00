package a2awire_test

import (
	"testing"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// ProtoJSON strings are UTF-8: a protojson parser refuses bytes that are not UTF-8 and a lone
// surrogate escape. encoding/json instead reads each as U+FFFD, so two different messageIds
// (or contextIds, taskIds, referenceTaskIds, texts) decode as one value.
func TestDistinctNonUTF8IDsDoNotDecodeAsOne(t *testing.T) {
	body := func(id string) []byte {
		return []byte(`{"message":{"messageId":"` + id + `","role":"ROLE_USER","parts":[{"text":"hello"}]}}`)
	}
	for _, pair := range [][2]string{
		{`\ud800`, `\udbff`},   // two different lone surrogate escapes
		{"caf\xe9", "caf\xe8"}, // two different bytes that are not UTF-8
		{`a\udc00`, "a\xff"},   // one of each
	} {
		a, errA := a2awire.DecodeSendMessageRequest(body(pair[0]), a2awire.Limits{})
		b, errB := a2awire.DecodeSendMessageRequest(body(pair[1]), a2awire.Limits{})
		if errA != nil || errB != nil {
			continue // refused, as a ProtoJSON parser refuses it: fine
		}
		if a.Message.MessageID == b.Message.MessageID {
			t.Errorf("messageIds %q and %q both decode as %q: the second send is a silent duplicate of the first",
				pair[0], pair[1], a.Message.MessageID)
		}
	}
}
