package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// Operations Send knows (the delivery package's); any other operation is sent like a reply.
const (
	OpReply    = delivery.OpReply
	OpQuestion = delivery.OpQuestion
	OpHandled  = delivery.OpHandled
)

// defaultPrompt is the text of a question that has nothing else to show: its only part is the
// requestedSchema its buttons are made from.
const defaultPrompt = "The agent needs your input."

// MetadataEventType is the event_type of the message metadata every posted part carries; its
// payload holds the delivery ID ("delivery_id") and the part number ("part", "parts").
const MetadataEventType = "channels_delivery"

// Send implements sources.Sender. A reply or question is chat.postMessage into the task's thread,
// rendered as mrkdwn and split into parts when long, each part carrying message metadata with the
// delivery ID, so Lookup can find it after a crash. A question's last part carries an "Answer"
// button, and a choice button per value when its requestedSchema is an enum; the receipt is that
// part's AnchorID, which becomes the question's reply anchor. "handled" adds the configured
// reaction to the message the task came from ("already_reacted" is success).
//
// Failures are typed for the delivery engine (see classify): a 429 is delivery.RetryAfter with
// Slack's Retry-After, an error response Slack gives for a request it refused is
// delivery.Permanent, and anything after which Slack may have posted stays indeterminate, so the
// engine asks Lookup rather than posting again.
func (s *Source) Send(ctx context.Context, d sources.Delivery) (sources.Receipt, error) {
	loc, err := decodeLocator(d.Locator)
	if err != nil {
		return sources.Receipt{}, delivery.Permanent(fmt.Errorf("slack delivery %s: %w", d.ID, err))
	}
	if d.Operation == OpHandled {
		return s.react(ctx, d, loc)
	}
	question := d.Operation == OpQuestion || d.State.Interrupted()
	chunks := Split(renderMessage(d.State, d.Message), s.opt.MaxMessageChars)
	if len(chunks) == 0 && question {
		// A question whose only content is its requestedSchema: its buttons need a message.
		chunks = []string{defaultPrompt}
	}
	if len(chunks) == 0 {
		return sources.Receipt{}, delivery.Permanent(fmt.Errorf("slack delivery %s: the message has nothing to show in Slack", d.ID))
	}
	// A split answer resumes: parts an earlier, interrupted Send posted are not posted again.
	posted := map[int]string{}
	if len(chunks) > 1 {
		if posted, err = s.findParts(ctx, loc, d.ID); err != nil {
			return sources.Receipt{}, readFailure(fmt.Errorf("slack delivery %s: look for parts already posted: %w", d.ID, err))
		}
	}
	var last string
	sent := false
	for i, chunk := range chunks {
		part := i + 1
		if ts, ok := posted[part]; ok {
			last = ts
			continue
		}
		if sent && s.opt.partInterval > 0 {
			select {
			case <-ctx.Done():
				return sources.Receipt{}, delivery.Retryable(fmt.Errorf("slack delivery %s: part %d/%d: %w", d.ID, part, len(chunks), ctx.Err()))
			case <-time.After(s.opt.partInterval):
			}
		}
		opts := []slack.MsgOption{
			slack.MsgOptionText(chunk, false),
			slack.MsgOptionTS(loc.ThreadTS),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: MetadataEventType, EventPayload: map[string]any{
				"delivery_id": d.ID, "part": part, "parts": len(chunks)}}),
		}
		if question && part == len(chunks) {
			opts = append(opts, slack.MsgOptionBlocks(questionBlocks(chunk, d.Message)...))
		}
		_, ts, err := s.api.PostMessageContext(ctx, loc.Channel, opts...)
		if err != nil {
			return sources.Receipt{}, fmt.Errorf("slack delivery %s: chat.postMessage part %d/%d: %w", d.ID, part, len(chunks), classify(err))
		}
		last, sent = ts, true
	}
	return sources.Receipt{ProviderID: AnchorID(loc.Channel, last)}, nil
}

// react adds the handled reaction; a reaction already there is the same outcome.
func (s *Source) react(ctx context.Context, d sources.Delivery, loc Locator) (sources.Receipt, error) {
	err := s.api.AddReactionContext(ctx, s.opt.HandledReaction, slack.NewRefToMessage(loc.Channel, loc.TS))
	if err != nil && slackCode(err) != "already_reacted" {
		return sources.Receipt{}, fmt.Errorf("slack delivery %s: reactions.add: %w", d.ID, classify(err))
	}
	return sources.Receipt{ProviderID: reactionID(loc, s.opt.HandledReaction)}, nil
}

func reactionID(loc Locator, name string) string { return AnchorID(loc.Channel, loc.TS) + ":" + name }

func decodeLocator(raw json.RawMessage) (Locator, error) {
	var loc Locator
	if err := json.Unmarshal(raw, &loc); err != nil {
		return loc, fmt.Errorf("locator: %w", err)
	}
	if loc.Channel == "" || loc.ThreadTS == "" || loc.TS == "" {
		return loc, errors.New("locator has no channel, thread or message")
	}
	return loc, nil
}

// slackCode is the Slack error code of a Web API error ("" for other errors).
func slackCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// questionBlocks lays out a question: its text, then a choice button per enum value (when the
// requestedSchema is one) and the "Answer" button that opens the answer dialog.
func questionBlocks(text string, msg taskplane.Message) []slack.Block {
	var blocks []slack.Block
	for _, t := range Split(text, 3000) { // a section's text holds at most 3000 characters
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, t, false, false), nil, nil))
	}
	var buttons []slack.BlockElement
	prop, choices := enumChoices(requestedSchema(msg))
	for i, c := range choices {
		v, _ := json.Marshal(choiceValue{Value: c.value, Property: prop})
		if len(v) > maxButtonValue { // bytes: at least as many as characters
			// Slack refuses the whole message for one such button: no choice buttons, the
			// answer is typed into the dialog.
			buttons = nil
			break
		}
		b := slack.NewButtonBlockElement(actionChoice+":"+strconv.Itoa(i), string(v),
			slack.NewTextBlockObject(slack.PlainTextType, buttonLabel(c), false, false))
		buttons = append(buttons, b)
	}
	answer := slack.NewButtonBlockElement(actionAnswer, "answer", slack.NewTextBlockObject(slack.PlainTextType, "Answer", false, false))
	answer.Style = slack.StylePrimary
	buttons = append(buttons, answer)
	return append(blocks, slack.NewActionBlock("channels_question", buttons...))
}

// Slack's limits on a button: its text holds 1 to 75 characters, its value at most 2000.
const (
	maxButtonText  = 75
	maxButtonValue = 2000
)

// buttonLabel is the text of a choice's button: its label, shortened to what a button shows; a
// blank one (the value "" or " ") is shown quoted, so the button can be seen and told apart.
func buttonLabel(c choice) string {
	label := c.label
	if strings.TrimSpace(label) == "" {
		label = strconv.Quote(label)
	}
	return truncate(label, maxButtonText)
}

// maxChoices is how many choice buttons fit beside the Answer button (an actions block holds 25).
const maxChoices = 24

type choice struct {
	value any
	label string
}

// requestedSchema finds a question's requestedSchema: in the elicitation extension's metadata,
// or in a {"requestedSchema": …} data part.
func requestedSchema(msg taskplane.Message) map[string]any {
	for _, v := range msg.Metadata {
		if m, ok := v.(map[string]any); ok {
			if s, ok := m["requestedSchema"].(map[string]any); ok {
				return s
			}
		}
	}
	for _, p := range msg.Parts {
		var d struct {
			Schema map[string]any `json:"requestedSchema"`
		}
		if p.Data != nil && exactjson.Unmarshal(p.Data, &d) == nil && d.Schema != nil { // numbers as written
			return d.Schema
		}
	}
	return nil
}

// enumChoices returns the choices of an enum schema — the schema itself, or an object schema
// whose single property is an enum (then prop names it) — or none.
func enumChoices(schema map[string]any) (prop string, out []choice) {
	if schema == nil {
		return "", nil
	}
	if props, ok := schema["properties"].(map[string]any); ok {
		if len(props) != 1 {
			return "", nil
		}
		for name, p := range props {
			ps, _ := p.(map[string]any)
			_, cs := enumChoices(ps)
			return name, cs
		}
	}
	if enum, ok := schema["enum"].([]any); ok {
		names, _ := schema["enumNames"].([]any)
		for i, v := range enum {
			label := fmt.Sprint(v)
			if i < len(names) {
				if n, ok := names[i].(string); ok && n != "" {
					label = n
				}
			}
			out = append(out, choice{value: v, label: label})
		}
	} else if one, ok := schema["oneOf"].([]any); ok {
		for _, o := range one {
			om, _ := o.(map[string]any)
			v, ok := om["const"]
			if !ok {
				return "", nil
			}
			label := fmt.Sprint(v)
			if t, ok := om["title"].(string); ok && t != "" {
				label = t
			}
			out = append(out, choice{value: v, label: label})
		}
	}
	if len(out) > maxChoices {
		return "", nil // too many for buttons: the Answer dialog takes a typed answer
	}
	return "", out
}

func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// dialogOpenTimeout bounds views.open for an answer dialog: the click that asked for it is
// acknowledged once it returns, within Slack's 3 s.
const dialogOpenTimeout = 2 * time.Second

// openDialog opens the answer dialog for a click on a question's "Answer" button. The click
// itself is not work; the dialog's view_submission is.
func (s *Source) openDialog(ctx context.Context, sink *sources.Sink, r *dialogRequest) {
	ref, _ := json.Marshal(dialogRef{Channel: r.channel, TS: r.ts, Thread: r.thr})
	input := slack.NewPlainTextInputBlockElement(nil, blockAnswerInput)
	input.Multiline = true
	var blocks []slack.Block
	if parts := Split(r.question, 2900); len(parts) > 0 {
		// Split, not a cut by length: never inside an entity or a Slack token, a code fence closed.
		q := parts[0]
		if len(parts) > 1 {
			q += " …"
		}
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, q, false, false), nil, nil))
	}
	blocks = append(blocks, slack.NewInputBlock(blockAnswerInput, slack.NewTextBlockObject(slack.PlainTextType, "Your answer", false, false), nil, input))
	view := slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           slack.NewTextBlockObject(slack.PlainTextType, "Answer", false, false),
		Submit:          slack.NewTextBlockObject(slack.PlainTextType, "Send", false, false),
		Close:           slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false),
		CallbackID:      callbackAnswer,
		PrivateMetadata: string(ref),
		Blocks:          slack.Blocks{BlockSet: blocks},
	}
	reason := "answer-dialog-opened"
	// The click is answered after this call, and Slack wants that within 3 s (a trigger_id
	// expires then too, so a later views.open could not succeed anyway).
	octx, cancel := context.WithTimeout(ctx, dialogOpenTimeout)
	defer cancel()
	if _, err := s.api.OpenViewContext(octx, r.triggerID, view); err != nil {
		s.log.Warn("slack views.open for an answer dialog", "err", err)
		reason = "answer-dialog-failed"
	}
	_ = sink.NonWork(ctx, s.principal, reason, nil)
}
