package slack_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/taskplane"
)

func TestSlackMrkdwnRendersMarkdown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"**bold** and __bold__", "*bold* and *bold*"},
		{"*italic* and _italic_", "_italic_ and _italic_"},
		{"~~gone~~", "~gone~"},
		{"# Title", "*Title*"},
		{"### Sub ###", "*Sub*"},
		{"- one\n* two\n  + nested", "• one\n• two\n  • nested"},
		{"see [the docs](https://example.com/a?b=1&c=2)", "see <https://example.com/a?b=1&c=2|the docs>"},
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"ping <!channel> and <!here>", "ping &lt;!channel&gt; and &lt;!here&gt;"},
		{"thanks <@U0HUMAN>, see <#C0OPS|ops> and <https://x.io|x>", "thanks <@U0HUMAN>, see <#C0OPS|ops> and <https://x.io|x>"},
		{"use `**not bold** <x>` here", "use `**not bold** &lt;x&gt;` here"},
		{"```go\nif a < b && **x** {\n```\nafter **b**", "```go\nif a &lt; b &amp;&amp; **x** {\n```\nafter *b*"},
		{"2 * 3 * 4", "2 * 3 * 4"},
	} {
		if got := slacksrc.Mrkdwn(tc.in); got != tc.want {
			t.Errorf("Mrkdwn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Slack reads <!channel>, <!here> and <!subteam^…> as pings, so a URL part is a link only when
// it is a web or mail address; anything else is shown as text.
func TestSlackURLPartsNeverPing(t *testing.T) {
	for _, tc := range []struct {
		part taskplane.Part
		want string
	}{
		{taskplane.Part{URL: "https://example.com/a|b"}, "<https://example.com/a%7Cb>"},
		{taskplane.Part{URL: "mailto:ops@example.com", Filename: "mail us"}, "<mailto:ops@example.com|mail us>"},
		{taskplane.Part{URL: "!channel"}, "!channel"},
		{taskplane.Part{URL: "!subteam^S0ALL", Filename: "x"}, "*x*\n!subteam^S0ALL"},
		{taskplane.Part{URL: "javascript:alert(1)"}, "javascript:alert(1)"},
	} {
		got := slacksrc.RenderMessage(taskplane.StateCompleted, taskplane.Message{Parts: []taskplane.Part{tc.part}})
		if got != tc.want {
			t.Errorf("URL part %+v rendered %q, want %q", tc.part, got, tc.want)
		}
	}
}

func TestSlackSplitKeepsPartsWithinTheLimit(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		b.WriteString("Paragraph with some words, ünïcödé and more words to fill the line. ")
		if i%5 == 4 {
			b.WriteString("\n\n")
		}
	}
	b.WriteString("\n```\n")
	for range 120 {
		b.WriteString("code line that must stay inside a fence\n")
	}
	b.WriteString("```\ntail")
	text := b.String()
	parts := slacksrc.Split(text, 1000)
	if len(parts) < 10 {
		t.Fatalf("%d parts, want many", len(parts))
	}
	for i, p := range parts {
		if len(p) > 1000 || !utf8.ValidString(p) {
			t.Fatalf("part %d: %d bytes, valid UTF-8 %v", i, len(p), utf8.ValidString(p))
		}
		if strings.Count(p, "```")%2 != 0 {
			t.Fatalf("part %d leaves a code block open:\n%s", i, p)
		}
	}
	joined := strings.Join(parts, "")
	for _, want := range []string{"Paragraph with some words", "code line that must stay inside a fence", "tail"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("the parts lost %q", want)
		}
	}
	if got := strings.Count(joined, "code line that must stay inside a fence"); got != 120 {
		t.Fatalf("code lines = %d, want 120", got)
	}
	if got := slacksrc.Split("short", 1000); len(got) != 1 || got[0] != "short" {
		t.Fatalf("Split(short) = %q", got)
	}
	word := strings.Repeat("é", 600)
	got := slacksrc.Split(word, 200)
	for _, p := range got {
		if len(p) > 200 || !utf8.ValidString(p) {
			t.Fatalf("a long word cut into %q", p)
		}
	}
	if strings.Join(got, "") != word {
		t.Fatal("a long word lost characters")
	}
}

// A part of a split answer never ends or starts inside an HTML entity (&lt;) or a Slack token
// (<@U…>, <https://…|label>): Slack would show the pieces as text, or a broken link.
func TestSplitNeverCutsAnEntityOrASlackToken(t *testing.T) {
	token := regexp.MustCompile(`<[^<>]*>`)
	entity := regexp.MustCompile(`&(amp|lt|gt);`)
	for _, md := range []string{
		strings.Repeat("a<b ", 3) + strings.Repeat("<", 400),
		strings.Repeat("&", 300),
		strings.Repeat("x", 150) + " [see the full deployment log here](https://example.com/logs/12345?a=1&b=2) and more text after it",
		strings.Repeat("y", 190) + "<@U0HUMAN> " + strings.Repeat("z ", 100),
		strings.Repeat("w ", 80) + "<https://example.com/a|a link with many words in its label> tail " + strings.Repeat("v", 300),
	} {
		text := slacksrc.Mrkdwn(md)
		parts := slacksrc.Split(text, 200)
		for i, p := range parts {
			if len(p) > 200 {
				t.Errorf("part %d is %d bytes", i+1, len(p))
			}
			rest := entity.ReplaceAllString(token.ReplaceAllString(p, ""), "")
			if strings.ContainsAny(rest, "<>&;") {
				t.Errorf("part %d of %q cuts an entity or a token: %q", i+1, md[:20], p)
			}
		}
		if got, want := strings.Join(strings.Fields(strings.Join(parts, " ")), ""), strings.Join(strings.Fields(text), ""); got != want {
			t.Errorf("the parts of %q lost text", md[:20])
		}
	}
}

// Split always ends: a code fence reopened in front of a token longer than a part (an inline
// ``` followed by a long link, a mention) does not make a part of the fence alone, again and again.
func TestSplitEndsWhenAReopenedFenceMeetsALongToken(t *testing.T) {
	for _, tc := range []struct {
		text  string
		limit int
	}{
		{"x```\n<@U12345678> b", 16},
		{"intro ```\n<https://example.com/report|the report> done", 30},
		{"Wrap code in ``` fences. <https://example.com/signed?" + strings.Repeat("sig", 1300) + "|the signed report> and more", 3900},
		{"```\n   <https://example.com/" + strings.Repeat("p", 80) + "|label with spaces> tail", 40},
	} {
		done := make(chan []string, 1)
		go func() { done <- slacksrc.Split(tc.text, tc.limit) }()
		select {
		case parts := <-done:
			for i, p := range parts {
				if len(p) > tc.limit {
					t.Errorf("%.20q: part %d is %d bytes, limit %d", tc.text, i+1, len(p), tc.limit)
				}
			}
			strip := func(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, "```", "")), "") }
			if got, want := strip(strings.Join(parts, " ")), strip(tc.text); got != want {
				t.Errorf("%.20q: the parts lost text: %q", tc.text, parts)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Split(%.20q, %d) has not returned after 5 s", tc.text, tc.limit)
		}
	}
}

// Bold, italic and strike apply to the text around Slack tokens and bare URLs, never inside them:
// a link to …/__init__.py still points there.
func TestEmphasisLeavesTokensAndBareURLsAlone(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"see <https://github.com/acme/app/blob/main/pkg/__init__.py>", "see <https://github.com/acme/app/blob/main/pkg/__init__.py>"},
		{"see https://github.com/acme/app/blob/main/pkg/__init__.py", "see https://github.com/acme/app/blob/main/pkg/__init__.py"},
		{"ping <https://example.com/a*b*c|here **now**>", "ping <https://example.com/a*b*c|here **now**>"},
		{"see https://x.io/a~~b~~c and **bold**", "see https://x.io/a~~b~~c and *bold*"},
		{"**see <@U0HUMAN>** and **https://x.io/a**.", "*see <@U0HUMAN>* and *https://x.io/a*."},
		{"a & https://x.io/?a=1&b=2 <b>", "a &amp; https://x.io/?a=1&amp;b=2 &lt;b&gt;"},
		{"**[docs](https://x.io/__a__)** __b__", "*<https://x.io/__a__|docs>* *b*"},
	} {
		if got := slacksrc.Mrkdwn(tc.in); got != tc.want {
			t.Errorf("Mrkdwn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
