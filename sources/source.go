// Package sources connects providers (Slack, GitHub, email, a signed webhook, a user's own
// system) to the task plane.
//
// A Source verifies and classifies what its provider sends, builds an Event, and hands it to a
// Sink; the Sink accepts it through taskplane.Plane.Accept in one transaction. The one rule every
// source keeps: acknowledge the provider (an HTTP 2xx, a Socket Mode ack, a checkpoint) only after
// Sink.Accept returned nil. A failed acceptance leaves the event unacknowledged, the provider
// delivers it again, and the task plane's idempotency returns the prior Task for the redelivery.
//
// Sources register by name in init, like database/sql drivers (Register panics on a duplicate);
// package sources/all blank-imports the native set. What a source declares — event identity,
// conversation key, checkpoint, ack point, continuation method, response operation, delivery
// recovery class — is not written in its code but read from its row of
// conformance-matrix/matrix.yaml (Declaration), and tests fail when the two drift. Package
// sourcetest is the kit every source's tests run. docs/writing-a-source.md walks through the
// webhook source as the worked example.
package sources

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane"
)

// Source is one configured provider connection.
type Source interface {
	// Name is the registered source name: the matrix row, and the source of every event, piece of
	// evidence and checkpoint it produces.
	Name() string
	// Run receives from the provider and hands events to sink until ctx ends. It returns nil when
	// ctx ended, or the error that stopped it.
	Run(ctx context.Context, sink *Sink) error
}

// Optional capabilities, discovered by type assertion.

// Endpoint is implemented by sources the provider reaches over HTTP (webhooks, the Events API).
// The server mounts the source's handler at Pattern, an http.ServeMux pattern.
type Endpoint interface {
	http.Handler
	Pattern() string
}

// Keyed is implemented by sources whose instances each authenticate their provider with a
// credential of their own (the webhook's signing secret). Key returns a digest of it: two
// instances of one server with the same key would accept each other's requests, so one's events
// could be replayed as the other's principal's (CheckKeys refuses them).
type Keyed interface {
	Key() [32]byte
}

// CheckKeys refuses instances of one source whose credentials are the same (Keyed). Each of
// srcs is the source built from the instance named at the same index of names.
func CheckKeys(names []string, srcs []Source) error {
	first := map[[32]byte]int{}
	var errs []error
	for i, src := range srcs {
		k, ok := src.(Keyed)
		if !ok {
			continue
		}
		key := k.Key()
		if j, dup := first[key]; dup && srcs[j].Name() == src.Name() {
			errs = append(errs, fmt.Errorf("source %s instances %q and %q share one secret: a request signed for one would be accepted by the other, under its principal; give each its own",
				src.Name(), names[j], names[i]))
			continue
		}
		first[key] = i
	}
	return errors.Join(errs...)
}

// Sender is implemented by sources that answer on their provider (a reply, a question, a handled
// marker). One Send is one provider mutation; the delivery engine makes sure it is asked at most
// once per delivery ID, and asks a Reconciler, or fails closed, after a crash. It is the delivery
// package's interface: a source's Sender plugs into the engine as it is.
type Sender = delivery.Sender

// Reconciler is implemented by sources whose delivery recovery class is "lookup": after a crash
// left a delivery in "sending", Lookup asks the provider whether it already happened.
type Reconciler = delivery.Reconciler

// Laner is implemented by Senders that name the rate lane of a delivery (a Slack channel, a
// GitHub token, a mail account).
type Laner = delivery.Laner

// Checkpointer is implemented by sources that resume from a stored position (pull sources: an
// IMAP mailbox, a notifications API) rather than relying on provider redelivery.
type Checkpointer interface {
	// DescribePosition renders a stored position for operators.
	DescribePosition(pos checkpoint.Position) string
}

// HealthChecker is implemented by sources that can tell whether their provider connection works
// (shown on /readyz and the admin page).
type HealthChecker interface {
	Health(ctx context.Context) error
}

// Validator is implemented by sources whose configuration can be checked before they run
// (`channels serve` refuses to start with an invalid source). New calls it.
type Validator interface {
	Validate() error
}

// Event is one provider event, as a source hands it to Sink.Accept. It has no task or context
// id: a source never selects a Task. Continuation happens only through ReplyTo and a verified
// reply anchor, and only for sources whose row declares the reply-anchor method.
type Event struct {
	// Principal owns the event (configured per source instance).
	Principal string
	// Identity is the event identity declared in the matrix row (e.g. Slack team+event_id); a
	// redelivery carries the same Identity.
	Identity string
	// ConversationKey groups events into one context (e.g. workspace+channel+thread root).
	ConversationKey string
	// ReplyTo is the provider message id this event directly replies to, when the provider has a
	// per-message reply relation ("" otherwise).
	ReplyTo string
	// Message is the A2A message built from the payload (role user). Its TaskID, ContextID and
	// ReferenceTaskIDs are cleared by the Sink: nothing in a provider body is trusted as an ID.
	Message taskplane.Message
	// Locator holds raw provider values (channel, thread, comment id) for answering; opaque to the
	// task plane.
	Locator json.RawMessage
	// Checkpoint, when set, is advanced in the Accept transaction. It is the position of the
	// instance that read the event, and names it (Position.Instance = Config.Instance): each
	// instance of a source resumes from its own position.
	Checkpoint *checkpoint.Position
	// Metadata is stored on a Task this event creates.
	Metadata map[string]any
}

// Delivery is one outbound provider mutation asked of a Sender.
type Delivery = delivery.Delivery

// Receipt is what the provider returned for a Send.
type Receipt = delivery.Receipt

// Config is one configured source instance.
type Config struct {
	// Instance is the configured name of the instance ("ci" for /sources/webhook/ci); several
	// instances of one source may run side by side.
	Instance string
	// Principal owns everything the instance accepts.
	Principal string
	// Options are the source's own settings, as decoded from the config file.
	Options map[string]any
}

// Decode decodes c.Options into v (a pointer to the source's settings struct, with json tags).
// An option the struct does not know is an error, so a typo in the config file is caught; so is
// one written in another case than its name ("Secret_Env"), which encoding/json would take.
func (c Config) Decode(v any) error {
	if err := c.checkOptionCase(v); err != nil {
		return err
	}
	b, err := json.Marshal(c.Options)
	if err != nil {
		return fmt.Errorf("source %s: options: %w", c.Instance, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("source %s: options: %w", c.Instance, err)
	}
	return nil
}

// checkOptionCase refuses an option whose name matches a field of v's struct only when case is
// ignored, as encoding/json ignores it (Unicode simple folding: "ſecret" is "secret" to it).
func (c Config) checkOptionCase(v any) error {
	rt := reflect.TypeOf(v)
	if rt == nil || rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for f := range rt.Elem().Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	for key := range c.Options {
		for _, name := range names {
			if key != name && strings.EqualFold(key, name) {
				return fmt.Errorf("source %s: options: %q is written %q (option names are case-sensitive)", c.Instance, name, key)
			}
		}
	}
	return nil
}
