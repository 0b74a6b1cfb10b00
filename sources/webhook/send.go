package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/drain"
	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/sources"
)

// Payload is the JSON body of a callback POST.
type Payload struct {
	Delivery  string `json:"delivery"`
	Operation string `json:"operation"`
	State     string `json:"state"`
	TaskID    string `json:"taskId"`
	ContextID string `json:"contextId"`
	// Event is the instance's event id the task came from.
	Event string `json:"event,omitempty"`
	Text  string `json:"text"`
}

// callbackClient bounds a callback; a receiver that hangs is an unknown outcome, retried. It
// follows no redirect: the signed answer goes to the configured URL and nowhere else.
var callbackClient = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Send implements sources.Sender: it POSTs the answer, signed with the endpoint's secret
// (SignCallback) and carrying the delivery ID in X-Channels-Delivery, to the configured callback.
// The receiver answers 2xx with {"id": "..."}, the id a later event names in its reply_to path; it
// must treat the delivery ID as an idempotency key (the matrix declares this source's recovery
// class idempotent). A 2xx without an id is delivered all the same (a question's replies then
// start new tasks: there is nothing to reply to); a redirect is refused.
func (s *Source) Send(ctx context.Context, d sources.Delivery) (sources.Receipt, error) {
	if s.opt.Callback == "" {
		return sources.Receipt{}, delivery.Permanent(fmt.Errorf("webhook %s: no callback configured", s.instance))
	}
	var loc struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(d.Locator, &loc) // the locator is ours; a missing id only leaves Event empty
	var text []string
	for _, p := range d.Message.Parts {
		if p.Text != "" {
			text = append(text, p.Text)
		}
	}
	body, err := json.Marshal(Payload{Delivery: d.ID, Operation: d.Operation, State: string(d.State),
		TaskID: d.TaskID, ContextID: d.ContextID, Event: loc.ID, Text: strings.Join(text, "\n")})
	if err != nil {
		return sources.Receipt{}, fmt.Errorf("webhook %s: encode delivery %s: %w", s.instance, d.ID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opt.Callback, bytes.NewReader(body))
	if err != nil {
		return sources.Receipt{}, fmt.Errorf("webhook %s: delivery %s: %w", s.instance, d.ID, redact.Error(err))
	}
	now := s.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(HeaderSignature, SignCallback(s.opt.secret, now, body))
	req.Header.Set(HeaderDelivery, d.ID)
	resp, err := callbackClient.Do(req)
	if err != nil {
		// The callback URL may hold a secret in its path or query: name only its origin.
		err = fmt.Errorf("webhook %s: delivery %s: %w", s.instance, d.ID, redact.URLError(err))
		if neverConnected(err) {
			return sources.Receipt{}, delivery.Retryable(err)
		}
		return sources.Receipt{}, err // it may have been written: an unknown outcome
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// Read what is left of a short refusal, so its connection serves the next delivery.
		drain.Discard(resp.Body, drain.MaxBytes, drain.MaxWait)
		refused := fmt.Errorf("webhook %s: delivery %s: callback answered %s", s.instance, d.ID, resp.Status)
		switch {
		case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooEarly:
			// The receiver did not read the request (408) or would not act on it yet (425).
			return sources.Receipt{}, delivery.WithStatus(delivery.Retryable(refused), resp.Status)
		case resp.StatusCode == http.StatusTooManyRequests:
			// Rate limited: wait as asked (seconds or an HTTP date). Without a usable
			// Retry-After, back off as for any passing refusal, spending attempts, rather than
			// snooze for a guessed second and use up the bounded snoozes in about a minute.
			if wait, ok := delivery.ParseRetryAfter(resp.Header.Get("Retry-After"), s.now()); ok {
				return sources.Receipt{}, delivery.WithStatus(delivery.RetryAfter(wait, refused), resp.Status)
			}
			return sources.Receipt{}, delivery.WithStatus(delivery.Retryable(refused), resp.Status)
		case resp.StatusCode/100 == 4, resp.StatusCode/100 == 3:
			// The receiver refused this delivery, or sent it elsewhere: repeating it cannot help.
			return sources.Receipt{}, delivery.WithStatus(delivery.Permanent(refused), resp.Status)
		}
		// A 5xx may come after the receiver acted; the class is idempotent, so the engine repeats.
		return sources.Receipt{}, delivery.WithStatus(refused, resp.Status)
	}
	// A 2xx: the receiver took it. Its receipt is read up to maxReceipt bytes.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReceipt+1))
	if err != nil {
		// The status line came and the body did not (the connection dropped): the receiver's id
		// is lost with it. The outcome is unknown, and the class idempotent, so the engine
		// repeats it and the receiver answers its id again.
		return sources.Receipt{}, fmt.Errorf("webhook %s: delivery %s: callback answered %s, then its body failed: %w",
			s.instance, d.ID, resp.Status, redact.Error(err))
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return sources.Receipt{}, nil // taken, with nothing to reply to (a 204)
	}
	id, isJSON := receiptID(raw)
	if !isJSON {
		// A 2xx that is not the receiver's JSON (a proxy's or a login page): whether the receiver
		// took the answer is unknown, and the class is idempotent, so the engine repeats it.
		return sources.Receipt{}, fmt.Errorf("webhook %s: delivery %s: callback answered 2xx without JSON", s.instance, d.ID)
	}
	if id == "" {
		// The receiver took it: sending it again would be the second message.
		return sources.Receipt{}, nil
	}
	return sources.Receipt{ProviderID: s.anchorID(id)}, nil
}

// neverConnected reports whether a request failed before a connection was made (refused,
// unreachable, the name did not resolve): the receiver certainly did not get it.
func neverConnected(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
	)
	return errors.As(err, &dns) || (errors.As(err, &op) && op.Op == "dial")
}

// maxReceipt bounds the callback receiver's answer that is read.
const maxReceipt = 64 << 10

// receiptID reads the top-level "id" of a receiver's answer, and whether the answer is JSON. An
// answer over maxReceipt (a receiver echoing the payload, say) is read only that far, as a stream:
// it is JSON if it starts as a JSON value, and its id is the one found within the bound, if any.
func receiptID(raw []byte) (id string, isJSON bool) {
	if len(raw) <= maxReceipt {
		doc, err := parseJSON(raw)
		if err != nil {
			return "", false
		}
		id, _ = lookup(doc, "id")
		return id, true
	}
	// Cut off: running out of the bound mid-value is expected; any other error is not JSON.
	cut := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
	dec := json.NewDecoder(bytes.NewReader(raw[:maxReceipt]))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return "", cut(err)
	}
	if tok != json.Delim('{') {
		return "", true // JSON, but not an object: no id
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", cut(err)
		}
		if key != "id" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", cut(err)
			}
			continue
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", cut(err)
		}
		id, _ = lookup(map[string]any{"id": v}, "id")
		return id, true
	}
	// More is false at the object's end (what follows it is past the point: the id is not
	// there) or where the bound cut the object.
	_, err = dec.Token()
	return "", err == nil || cut(err)
}

// Sends reports whether the endpoint has a callback to send answers and questions to; the
// delivery router leaves an endpoint without one out (its tasks' results stay in Channels).
func (s *Source) Sends() bool { return s.opt.Callback != "" }

// anchorID namespaces a callback receiver's id by instance, so two endpoints of one principal
// never share an anchor.
func (s *Source) anchorID(id string) string { return s.instance + ":" + id }
