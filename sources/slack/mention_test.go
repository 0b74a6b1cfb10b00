package slack

import "testing"

// Slack writes a mention as "<@U123>" or, with a label, "<@U123|name>"; both are the bot's, and
// "<@U1234>" or an unclosed "<@U123|" are not.
func TestAMentionIsTheBotsWithOrWithoutALabel(t *testing.T) {
	for text, want := range map[string]struct {
		rest  string
		found bool
	}{
		"<@U123> deploy":                   {" deploy", true},
		"<@U123|channels> deploy":          {" deploy", true},
		"hey <@U123|ops bot>, and <@U123>": {"hey , and ", true},
		"<@U1234> deploy":                  {"<@U1234> deploy", false},
		"<@U123|channels deploy":           {"<@U123|channels deploy", false},
		"<@U12> <@U123x>":                  {"<@U12> <@U123x>", false},
		"no mention":                       {"no mention", false},
	} {
		rest, found := withoutMention(text, "U123")
		if rest != want.rest || found != want.found {
			t.Errorf("withoutMention(%q) = %q, %v; want %q, %v", text, rest, found, want.rest, want.found)
		}
	}
}
