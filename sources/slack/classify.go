package slack

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// Interactive element ids of the questions Send posts. Payloads naming anything else are not ours.
const (
	actionAnswer     = "channels_answer"      // the "Answer" button: opens the answer dialog
	actionChoice     = "channels_choice"      // choice buttons (channels_choice:N) of an enum requestedSchema
	callbackAnswer   = "channels_answer"      // the answer dialog's callback_id
	blockAnswerInput = "channels_answer_text" // the dialog's input block and element
)

// Locator is what a Task made from Slack keeps about where it came from (Origin.Locator): where
// Send answers. It is the source's own record, never read as an id of anything in Channels.
type Locator struct {
	Team    string `json:"team"`
	Channel string `json:"channel"`
	// ThreadTS is the thread root the answers go into.
	ThreadTS string `json:"thread_ts"`
	// TS is the message that made the Task (where the "handled" reaction goes).
	TS   string `json:"ts"`
	User string `json:"user,omitempty"`
	// Instance is the configured instance the event came through: the one a principal's answer
	// goes out through when it has several (one per workspace).
	Instance string `json:"instance,omitempty"`
}

// AnchorID is the provider id of a posted message, the receipt of a delivery and the reply
// anchor of a question: the channel and ts that identify a Slack message.
func AnchorID(channel, ts string) string { return channel + ":" + ts }

// conversationKey is workspace + channel + thread root.
func conversationKey(team, channel, root string) string { return team + ":" + channel + ":" + root }

// verdict is what an envelope is: exactly one of work (event), non-work, malformed, or a
// request to open the answer dialog.
type verdict struct {
	event     sources.Event
	nonWork   string
	malformed string
	detail    map[string]any
	dialog    *dialogRequest
}

func nonWork(reason string) verdict { return verdict{nonWork: reason} }

func malformed(problem string, detail map[string]any) verdict {
	return verdict{malformed: problem, detail: detail}
}

// innerEvent holds the fields of an Events API inner event that classification reads.
type innerEvent struct {
	Type        string      `json:"type"`
	Subtype     string      `json:"subtype"`
	User        string      `json:"user"`
	BotID       string      `json:"bot_id"`
	AppID       string      `json:"app_id"`
	Text        string      `json:"text"`
	TS          string      `json:"ts"`
	ThreadTS    string      `json:"thread_ts"`
	Channel     string      `json:"channel"`
	ChannelType string      `json:"channel_type"`
	Files       []eventFile `json:"files"`
	// Edited is set on an app_mention Slack fires again, with a new event_id, when the message
	// that mentions the bot is edited.
	Edited *json.RawMessage `json:"edited"`
}

type eventFile struct {
	Name       string `json:"name"`
	Mimetype   string `json:"mimetype"`
	URLPrivate string `json:"url_private"`
}

// classifyCallback reads an Events API body (the HTTP POST body, or a Socket Mode events_api
// payload). url_verification is answered by the HTTP handler before this.
func (s *Source) classifyCallback(raw []byte) verdict {
	var cb slackevents.EventsAPICallbackEvent
	if err := json.Unmarshal(raw, &cb); err != nil {
		return malformed("invalid JSON", nil)
	}
	switch cb.Type {
	case slackevents.CallbackEvent:
	case string(slackevents.AppRateLimited):
		s.log.Warn("slack rate-limits this app's event subscriptions; events were dropped by Slack")
		return nonWork("app_rate_limited")
	case "":
		return malformed("no type", nil)
	default:
		return nonWork("type:" + cb.Type)
	}
	if cb.TeamID == "" || cb.EventID == "" || cb.InnerEvent == nil {
		return malformed("event_callback without team_id, event_id or event", map[string]any{"event_id": cb.EventID})
	}
	var in innerEvent
	if err := json.Unmarshal(*cb.InnerEvent, &in); err != nil {
		return malformed("event is not an object", map[string]any{"event_id": cb.EventID})
	}
	detail := map[string]any{"event_id": cb.EventID, "type": in.Type}
	bot := s.bot.Load()
	if !bot.ours(cb.TeamID, cb.Authorizations) {
		return nonWork(reasonForeign)
	}
	own := in.User == bot.UserID || (in.BotID != "" && in.BotID == bot.BotID)
	switch in.Type {
	case "app_mention":
		switch {
		case own:
			return nonWork("own-bot")
		case in.BotID != "":
			return nonWork("other-bot")
		case in.Channel != "" && !s.opt.channelAllowed(in.Channel):
			return nonWork("channel-not-allowed")
		case in.Edited != nil:
			return nonWork("edit") // the mention made its task when it was posted
		}
	case "message":
		switch in.Subtype {
		case "", "file_share", "thread_broadcast":
		case "message_changed":
			return nonWork("edit")
		case "message_deleted":
			return nonWork("delete")
		case "channel_join", "group_join", "channel_leave", "group_leave":
			return nonWork("join")
		case "bot_message":
			if own {
				return nonWork("own-bot")
			}
			return nonWork("other-bot")
		default:
			return nonWork("subtype:" + in.Subtype)
		}
		switch {
		case own:
			return nonWork("own-bot")
		case in.BotID != "":
			return nonWork("other-bot")
		case in.ChannelType == "im":
			if !s.opt.dms {
				return nonWork("direct-messages-off")
			}
		case in.Channel != "" && !s.opt.channelAllowed(in.Channel):
			return nonWork("channel-not-allowed")
		case bot.UserID != "" && mentions(in.Text, bot.UserID):
			return nonWork("mention-in-message") // its app_mention event is the work
		case s.opt.ChannelMessages == ChannelNone:
			return nonWork("channel-message")
		case s.opt.ChannelMessages == ChannelThreads && (in.ThreadTS == "" || in.ThreadTS == in.TS):
			return nonWork("top-level-channel-message")
		}
	case "member_joined_channel", "member_left_channel":
		return nonWork("join")
	default:
		return nonWork("event:" + in.Type)
	}
	if in.Channel == "" || in.TS == "" || in.User == "" {
		return malformed(in.Type+" without channel, ts or user", detail)
	}
	parts := s.messageParts(in.Text, in.Files)
	if len(parts) == 0 {
		return malformed(in.Type+" without text or files", detail)
	}
	root := in.ThreadTS
	if root == "" {
		root = in.TS
	}
	identity := cb.TeamID + ":" + cb.EventID
	// The conversation (and the channel's rate lane) is keyed by this installation's workspace,
	// as clicks and dialogs are: in a shared channel team_id is the workspace that created it.
	loc := Locator{Team: firstOf(bot.Team, cb.TeamID), Channel: in.Channel, ThreadTS: root, TS: in.TS, User: in.User}
	return verdict{event: s.event(identity, loc, "", parts, map[string]any{"event": in.Type, "channel_type": in.ChannelType})}
}

// messageParts turns a message's text and files into message parts.
func (s *Source) messageParts(text string, files []eventFile) []taskplane.Part {
	var parts []taskplane.Part
	if t := s.ownMention(text); t != "" {
		parts = append(parts, taskplane.TextPart(t))
	} else if strings.TrimSpace(text) != "" {
		parts = append(parts, taskplane.TextPart(strings.TrimSpace(text)))
	}
	for _, f := range files {
		if f.URLPrivate != "" {
			parts = append(parts, taskplane.Part{URL: f.URLPrivate, Filename: f.Name, MediaType: f.Mimetype})
		}
	}
	return parts
}

// event builds the Event of a work envelope. replyTo is the anchor id of the message it answers
// ("" for events without a per-message reply relation).
func (s *Source) event(identity string, loc Locator, replyTo string, parts []taskplane.Part, extra map[string]any) sources.Event {
	meta := map[string]any{"team": loc.Team, "channel": loc.Channel, "ts": loc.TS, "thread_ts": loc.ThreadTS, "user": loc.User}
	for k, v := range extra {
		if v != "" && v != nil {
			meta[k] = v
		}
	}
	loc.Instance = s.instance
	b, _ := json.Marshal(loc) // plain strings: cannot fail
	return sources.Event{
		Principal:       s.principal,
		Identity:        identity,
		ConversationKey: conversationKey(loc.Team, loc.Channel, loc.ThreadTS),
		ReplyTo:         replyTo,
		Locator:         b,
		Message: taskplane.Message{ID: "slack:" + identity, Role: taskplane.RoleUser, Parts: parts,
			Metadata: map[string]any{"slack": meta}},
	}
}

// dialogRequest asks for the answer dialog of a question (the "Answer" button was clicked).
type dialogRequest struct {
	triggerID        string
	channel, ts, thr string
	question         string
}

// dialogRef is the answer dialog's private_metadata: the question message it answers. Slack
// returns it unchanged, inside a signed payload, with the view_submission.
type dialogRef struct {
	Channel string `json:"c"`
	TS      string `json:"ts"`
	Thread  string `json:"th"`
}

// choiceValue is the value of a choice button: the enum value, and the requestedSchema property
// it answers when the schema is an object.
type choiceValue struct {
	Value    any    `json:"v"`
	Property string `json:"p,omitempty"`
}

// classifyInteraction reads an interactive payload (the "payload" form field over HTTP, or a
// Socket Mode interactive envelope's payload).
func (s *Source) classifyInteraction(raw []byte) verdict {
	var ic slack.InteractionCallback
	if err := json.Unmarshal(raw, &ic); err != nil {
		return malformed("invalid interactive payload", nil)
	}
	bot := s.bot.Load()
	team := bot.Team
	if team == "" {
		team = ic.Team.ID
	}
	switch ic.Type {
	case slack.InteractionTypeBlockActions:
		return s.classifyBlockActions(&ic, team)
	case slack.InteractionTypeViewSubmission:
		return s.classifyViewSubmission(&ic, team)
	case "":
		return malformed("interactive payload without type", nil)
	}
	return nonWork("interactive:" + string(ic.Type))
}

func (s *Source) classifyBlockActions(ic *slack.InteractionCallback, team string) verdict {
	var act *slack.BlockAction
	for _, a := range ic.ActionCallback.BlockActions {
		if a != nil && (a.ActionID == actionAnswer || strings.HasPrefix(a.ActionID, actionChoice+":")) {
			act = a
			break
		}
	}
	if act == nil {
		return nonWork("block_actions:other")
	}
	if !s.bot.Load().postedByUs(ic.Message.BotID, ic.Message.User, ic.Team.ID, ic.Enterprise.ID, ic.IsEnterpriseInstall) {
		return nonWork(reasonForeign) // a question another installation of the app posted
	}
	channel, ts := ic.Container.ChannelID, ic.Container.MessageTs
	if channel == "" {
		channel = ic.Channel.ID
	}
	if ts == "" {
		ts = ic.Message.Timestamp
	}
	detail := map[string]any{"type": "block_actions", "action": act.ActionID}
	if channel == "" || ts == "" || (ic.TriggerID == "" && act.ActionTs == "") {
		return malformed("block_actions without the message it answers", detail)
	}
	root := firstOf(ic.Container.ThreadTs, ic.Message.ThreadTimestamp, ts)
	if act.ActionID == actionAnswer {
		return verdict{dialog: &dialogRequest{triggerID: ic.TriggerID, channel: channel, ts: ts, thr: root,
			question: ic.Message.Text}}
	}
	var cv choiceValue
	// Numbers as written (json.Number): the button carries the exact value, 2^53 and beyond too.
	if err := exactjson.Unmarshal([]byte(act.Value), &cv); err != nil || cv.Value == nil {
		return malformed("choice button without a value", detail)
	}
	text, ok := cv.Value.(string)
	if !ok {
		b, _ := json.Marshal(cv.Value)
		text = string(b)
	}
	parts := []taskplane.Part{taskplane.TextPart(text)}
	if cv.Property != "" {
		b, _ := json.Marshal(map[string]any{cv.Property: cv.Value})
		parts = append(parts, taskplane.Part{Data: b, MediaType: "application/json"})
	}
	identity := team + ":trigger:" + ic.TriggerID
	if ic.TriggerID == "" {
		identity = team + ":action:" + channel + ":" + ts + ":" + act.ActionTs
	}
	loc := Locator{Team: team, Channel: channel, ThreadTS: root, TS: ts, User: ic.User.ID}
	return verdict{event: s.event(identity, loc, AnchorID(channel, ts), parts, map[string]any{"via": "button"})}
}

func (s *Source) classifyViewSubmission(ic *slack.InteractionCallback, team string) verdict {
	if ic.View.CallbackID != callbackAnswer {
		return nonWork("view_submission:other")
	}
	if !s.bot.Load().postedByUs(ic.View.BotID, "", firstOf(ic.View.AppInstalledTeamID, ic.Team.ID), ic.Enterprise.ID, ic.IsEnterpriseInstall) {
		return nonWork(reasonForeign) // a dialog another installation of the app opened
	}
	detail := map[string]any{"type": "view_submission"}
	var ref dialogRef
	if err := json.Unmarshal([]byte(ic.View.PrivateMetadata), &ref); err != nil || ref.Channel == "" || ref.TS == "" {
		return malformed("answer dialog without the message it answers", detail)
	}
	var text string
	if ic.View.State != nil {
		text = strings.TrimSpace(ic.View.State.Values[blockAnswerInput][blockAnswerInput].Value)
	}
	if text == "" {
		return malformed("answer dialog without an answer", detail)
	}
	identity := team + ":trigger:" + ic.TriggerID
	if ic.TriggerID == "" {
		if ic.View.ID == "" {
			return malformed("answer dialog without trigger_id or view id", detail)
		}
		identity = team + ":view:" + ic.View.ID + ":" + ic.View.Hash
	}
	loc := Locator{Team: team, Channel: ref.Channel, ThreadTS: firstOf(ref.Thread, ref.TS), TS: ref.TS, User: ic.User.ID}
	return verdict{event: s.event(identity, loc, AnchorID(ref.Channel, ref.TS), []taskplane.Part{taskplane.TextPart(text)},
		map[string]any{"via": "dialog"})}
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// String names a verdict for logs.
func (v verdict) String() string {
	switch {
	case v.malformed != "":
		return "malformed: " + v.malformed
	case v.nonWork != "":
		return "non-work: " + v.nonWork
	case v.dialog != nil:
		return "answer dialog for " + AnchorID(v.dialog.channel, v.dialog.ts)
	}
	return fmt.Sprintf("work %s", v.event.Identity)
}

// mentions reports whether text mentions userID, labelled or not (withoutMention).
func mentions(text, userID string) bool {
	_, found := withoutMention(text, userID)
	return found
}
