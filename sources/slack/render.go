package slack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/channels-dev/channels/taskplane"
)

// Rendering an agent's message as Slack mrkdwn. Agents write Markdown; Slack's mrkdwn differs
// (*bold*, _italic_, ~strike~, <url|text>, no headings) and reads <…> as mentions and links, so
// text is escaped except for the user and channel mentions and links an answer may carry.

var (
	reHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	reBullet  = regexp.MustCompile(`^(\s*)[-*+]\s+`)
	reLink    = regexp.MustCompile(`\[([^\]\n]+)\]\((https?://[^)\s]+)\)`)
	reBold    = regexp.MustCompile(`\*\*([^*\n]+)\*\*|__([^_\n]+)__`)
	reItalic  = regexp.MustCompile(`(^|[^*\w])\*([^*\s][^*\n]*?)\*($|[^*\w])`)
	reStrike  = regexp.MustCompile(`~~([^~\n]+)~~`)
	// Slack tokens kept as they are: user and channel mentions, and links. Special mentions
	// (<!channel>, <!here>) are escaped: an answer never pings a whole channel.
	reToken = regexp.MustCompile(`<(?:@[UW][A-Z0-9]+|#C[A-Z0-9]+(?:\|[^<>\n]*)?|https?://[^<>\s|]+(?:\|[^<>\n]*)?)>`)
	// A bare URL, without the punctuation or emphasis marks that may follow it in a sentence.
	reBareURL = regexp.MustCompile(`https?://[^\s<>]*[^\s<>*_~.,;:!?)'"]`)
	// reKept finds what emphasis must not touch: Markdown links, the tokens kept and bare URLs.
	reKept = regexp.MustCompile(reLink.String() + `|` + reToken.String() + `|` + reBareURL.String())
	// reHeld finds the placeholders inlineText puts where reKept matched.
	reHeld = regexp.MustCompile("\x01([0-9]+)\x01")
)

// escape escapes the three characters Slack requires escaped in message text.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Mrkdwn converts Markdown text to Slack mrkdwn: code blocks and inline code are kept verbatim
// (escaped), headings become bold lines, list markers become bullets, and bold, italic, strike
// and links take Slack's syntax.
func Mrkdwn(md string) string {
	lines := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			lines[i] = "```" + escape(strings.TrimPrefix(strings.TrimSpace(line), "```"))
			if !inFence {
				lines[i] = "```"
			}
			continue
		}
		if inFence {
			lines[i] = escape(line)
			continue
		}
		if m := reHeading.FindStringSubmatch(line); m != nil {
			lines[i] = "*" + inline(m[1]) + "*"
			continue
		}
		if m := reBullet.FindStringSubmatch(line); m != nil {
			lines[i] = m[1] + "• " + inline(line[len(m[0]):])
			continue
		}
		lines[i] = inline(line)
	}
	return strings.Join(lines, "\n")
}

// inline converts one line outside code blocks; spans in backticks are kept verbatim.
func inline(line string) string {
	segs := strings.Split(line, "`")
	for i := range segs {
		if i%2 == 1 && i < len(segs)-1 {
			segs[i] = escape(segs[i]) // inside `code`
			continue
		}
		segs[i] = inlineText(segs[i])
	}
	return strings.Join(segs, "`")
}

// inlineText converts text outside code: Markdown links become Slack links, the Slack tokens an
// answer may carry (reToken) are kept, the rest is escaped, and bold, italic and strike take
// Slack's syntax. Links, tokens and bare URLs are held aside as placeholders while the emphasis
// rules run, so the rules never rewrite them (a path such as …/__init__.py is not a bold "init"),
// while emphasis around them (**see <@U123>**) still applies.
func inlineText(s string) string {
	s = strings.ReplaceAll(s, "\x01", "") // the placeholder mark; no use in a message
	var (
		b    strings.Builder
		held []string
	)
	last := 0
	for _, m := range reKept.FindAllStringIndex(s, -1) {
		b.WriteString(escape(s[last:m[0]]))
		kept := s[m[0]:m[1]]
		switch {
		case strings.HasPrefix(kept, "["):
			l := reLink.FindStringSubmatch(kept)
			kept = "<" + linkURL(l[2]) + "|" + strings.ReplaceAll(escape(l[1]), "|", "¦") + ">"
		case !strings.HasPrefix(kept, "<"):
			kept = escape(kept) // a bare URL
		}
		b.WriteString("\x01" + strconv.Itoa(len(held)) + "\x01")
		held = append(held, kept)
		last = m[1]
	}
	b.WriteString(escape(s[last:]))
	return reHeld.ReplaceAllStringFunc(emphasis(b.String()), func(m string) string {
		n, _ := strconv.Atoi(m[1 : len(m)-1])
		return held[n]
	})
}

// linkable reports whether u may be shown as a Slack link: a web or mail address.
func linkable(u string) bool {
	scheme, _, ok := strings.Cut(u, ":")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https", "mailto":
		return true
	}
	return false
}

// linkURL makes a URL safe inside <url|text>: the characters that would end the link are
// percent-encoded.
func linkURL(u string) string {
	return strings.NewReplacer("|", "%7C", "<", "%3C", ">", "%3E").Replace(u)
}

func emphasis(s string) string {
	const boldMark = "\x00"
	s = reBold.ReplaceAllStringFunc(s, func(m string) string {
		sub := reBold.FindStringSubmatch(m)
		return boldMark + sub[1] + sub[2] + boldMark
	})
	s = reItalic.ReplaceAllString(s, "${1}_${2}_${3}")
	s = reStrike.ReplaceAllString(s, "~${1}~")
	return strings.ReplaceAll(s, boldMark, "*")
}

// statusLine heads an answer whose task did not complete normally.
func statusLine(st taskplane.State) string {
	switch st {
	case taskplane.StateFailed:
		return ":x: *The work failed.*"
	case taskplane.StateRejected:
		return ":no_entry: *Declined.*"
	case taskplane.StateCanceled:
		return ":heavy_multiplication_x: *Canceled.*"
	case taskplane.StateAuthRequired:
		return ":lock: *Sign-in needed.*"
	}
	return ""
}

// renderMessage renders every part of an agent's message (text, data, links, files) as mrkdwn.
func renderMessage(st taskplane.State, msg taskplane.Message) string {
	var out []string
	if h := statusLine(st); h != "" {
		out = append(out, h)
	}
	for _, p := range msg.Parts {
		if r := renderPart(p); r != "" {
			out = append(out, r)
		}
	}
	return strings.Join(out, "\n\n")
}

func renderPart(p taskplane.Part) string {
	name := p.Filename
	switch {
	case p.Text != "":
		return Mrkdwn(p.Text)
	case p.Data != nil:
		var obj map[string]json.RawMessage
		if json.Unmarshal(p.Data, &obj) == nil && len(obj) == 1 && obj["requestedSchema"] != nil {
			return "" // a question's schema: shown as buttons, not as text
		}
		var pretty bytes.Buffer
		if json.Indent(&pretty, p.Data, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(p.Data)
		}
		return titled(name, "```\n"+escape(pretty.String())+"\n```")
	case p.URL != "":
		if !linkable(p.URL) {
			// Slack reads <!channel>, <!here> and <!subteam^…> as pings: a URL part that is not a
			// web or mail address is shown as text.
			return titled(name, escape(p.URL))
		}
		if name != "" {
			return "<" + linkURL(p.URL) + "|" + escape(name) + ">"
		}
		return "<" + linkURL(p.URL) + ">"
	case p.Raw != nil:
		if isText(p.MediaType) && utf8.Valid(p.Raw) {
			return titled(name, "```\n"+escape(strings.TrimRight(string(p.Raw), "\n"))+"\n```")
		}
		if name == "" {
			name = "file"
		}
		return fmt.Sprintf("_(%s: %d bytes of %s, not shown in Slack)_", escape(name), len(p.Raw), escape(firstOf(p.MediaType, "binary data")))
	}
	return ""
}

func titled(name, body string) string {
	if name == "" {
		return body
	}
	return "*" + escape(name) + "*\n" + body
}

func isText(mediaType string) bool {
	mt := strings.ToLower(strings.TrimSpace(strings.SplitN(mediaType, ";", 2)[0]))
	switch {
	case mt == "", strings.HasPrefix(mt, "text/"), mt == "application/json", mt == "application/yaml",
		mt == "application/x-yaml", mt == "application/xml", mt == "application/x-sh", strings.HasSuffix(mt, "+json"):
		return true
	}
	return false
}

// fenceReserve is the room a chunk keeps for closing and reopening a code block.
const fenceReserve = len("\n```")

// Split cuts rendered mrkdwn into chunks of at most limit bytes, at a paragraph, line or word
// boundary where one is near, never inside a UTF-8 sequence. A code block cut in two is closed
// at the end of one chunk and reopened at the start of the next.
func Split(text string, limit int) []string {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	var out []string
	reopen := false
	for text != "" {
		lead := 0 // what this chunk must hold beyond, to say anything: the reopened fence
		if reopen {
			text = "```\n" + text
			lead = len("```\n")
		}
		if len(text) <= limit {
			out = append(out, text)
			break
		}
		room := limit - fenceReserve
		cut := cutPoint(text, room, lead)
		chunk := strings.TrimRight(text[:cut], " \n")
		text = strings.TrimLeft(text[cut:], " \n")
		reopen = strings.Count(chunk, "```")%2 == 1
		if reopen {
			chunk += "\n```"
		}
		out = append(out, chunk)
	}
	return out
}

// cutPoint finds where to cut s to at most room bytes: the last paragraph break in the second
// half, else the last line break, else the last space, else the last rune boundary — never inside
// an HTML entity (&lt;) or a Slack token (<@U123>, <https://…|label>), which a cut would break
// into text; a cut that would be is moved before the entity or token, unless that leaves the
// chunk nothing past its first lead bytes (a reopened code fence): a token longer than a whole
// part is cut as before, so every chunk carries text and Split always ends.
func cutPoint(s string, room, lead int) int {
	head := s[:room]
	for _, sep := range []string{"\n\n", "\n", " "} {
		for i := strings.LastIndex(head, sep); i > room/2 && i > lead; i = strings.LastIndex(head[:i], sep) {
			if _, inside := enclosing(s, i+len(sep)); !inside {
				return i + len(sep)
			}
		}
	}
	cut := room
	if start, inside := enclosing(s, cut); inside && start > lead {
		cut = start
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

// enclosing reports whether a cut of s at i falls inside a Slack token or an HTML entity, and
// where that starts. Rendered text has a raw "<" only at a token's start and a raw "&" only at an
// entity's start or inside a token (a link's URL).
func enclosing(s string, i int) (start int, inside bool) {
	if lt := strings.LastIndexByte(s[:i], '<'); lt >= 0 && !strings.Contains(s[lt:i], ">") {
		if gt := strings.IndexAny(s[i:], "<>"); gt >= 0 && s[i+gt] == '>' {
			return lt, true
		}
	}
	if amp := strings.LastIndexByte(s[:i], '&'); amp >= 0 && i-amp <= maxEntity {
		if semi := strings.IndexByte(s[amp:], ';'); semi > 1 && semi <= maxEntity && amp+semi >= i && entityName(s[amp+1:amp+semi]) {
			return amp, true
		}
	}
	return 0, false
}

// maxEntity is the longest entity's length without its ";" (&#x1F600;).
const maxEntity = 8

func entityName(n string) bool {
	for _, r := range n {
		if !(r == '#' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
