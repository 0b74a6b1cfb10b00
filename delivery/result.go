package delivery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind classifies a Sender's failure by what it says about the provider's state.
type Kind int

// Failure kinds.
const (
	// KindIndeterminate: the provider may or may not have acted (a timeout or reset after the
	// request was written, a 5xx after send). The delivery stays in sending and its recovery
	// class decides: repeat, look up, or fail closed. Any error not marked otherwise is this.
	KindIndeterminate Kind = iota
	// KindPermanent: the provider refused and will refuse again (a 4xx, a platform error such as
	// channel_not_found). The delivery fails at once, or is ambiguous when an earlier call of
	// an idempotent delivery had an unknown outcome (it may have landed).
	KindPermanent
	// KindRetryable: the provider certainly did not act, and may later (a refused connection, a
	// 503 before the request was read). Retried with capped exponential backoff, spending an
	// attempt, until attempts run out.
	KindRetryable
	// KindRetryAfter: the provider asked to come back later (HTTP 429 Retry-After, Slack
	// RateLimitedError). The delivery and its lane wait that long; the attempt is given back.
	KindRetryAfter
)

func (k Kind) String() string {
	switch k {
	case KindPermanent:
		return "permanent"
	case KindRetryable:
		return "retryable"
	case KindRetryAfter:
		return "retry-after"
	default:
		return "indeterminate"
	}
}

// Error is a classified Sender failure. Build it with Permanent, Retryable, RetryAfter or
// Indeterminate, and attach the provider's status with WithStatus.
type Error struct {
	Kind Kind
	// RetryAfter is the wait the provider asked for (KindRetryAfter).
	RetryAfter time.Duration
	// Status is the provider's own status ("429", "channel_not_found", "550 5.1.1").
	Status string
	// Withdrawn marks a refusal the sender makes itself because the delivery is no longer wanted
	// (Withdrawn): it fails even after an unknown outcome, which no one is left to resolve.
	Withdrawn bool
	Err       error
}

func (e *Error) Error() string {
	msg := e.Kind.String()
	if e.Kind == KindRetryAfter {
		msg += " " + e.RetryAfter.String()
	}
	if e.Status != "" {
		msg += " (" + e.Status + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as a determinate refusal: the delivery fails without another attempt.
func Permanent(err error) error { return &Error{Kind: KindPermanent, Err: err} }

// Withdrawn marks err as the sender's own refusal of a delivery no longer wanted (a push
// notification whose config its client deleted or replaced): the delivery fails without another
// attempt, and unlike Permanent it fails even after an earlier call's unknown outcome, since
// whether that call landed matters to no one any more.
func Withdrawn(err error) error { return &Error{Kind: KindPermanent, Withdrawn: true, Err: err} }

// Retryable marks err as a determinate, passing failure: the provider did not act; try again later
// (spending an attempt).
func Retryable(err error) error { return &Error{Kind: KindRetryable, Err: err} }

// RetryAfter marks err as the provider's request to wait d: the delivery snoozes for d without
// spending an attempt, and its lane waits too.
func RetryAfter(d time.Duration, err error) error {
	return &Error{Kind: KindRetryAfter, RetryAfter: d, Err: err}
}

// ParseRetryAfter reads an HTTP Retry-After header value (RFC 9110: delay-seconds, or an
// HTTP-date measured from now; a date already past is 0). ok is false for an empty value or one
// of neither form: a sender that got no usable wait should back off (Retryable) rather than
// snooze for a guessed one, which would spend the bounded snoozes in no time. The engine bounds
// the result (Policy.MinRetryAfter, Policy.MaxRetryAfter).
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	// Beyond the range, ParseUint gives its largest value; a Duration holds about 292 years.
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return time.Duration(min(secs, uint64(math.MaxInt64/int64(time.Second)))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Indeterminate marks err as an unknown outcome: the provider may have acted.
func Indeterminate(err error) error { return &Error{Kind: KindIndeterminate, Err: err} }

// WithStatus attaches the provider's status to err (classified or not), for the attempt's
// evidence.
func WithStatus(err error, status string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Status = status
		return &c
	}
	return &Error{Kind: KindIndeterminate, Status: status, Err: err}
}

// Classify returns the kind, Retry-After wait and provider status of a Sender's error. An error
// that carries no *Error is indeterminate.
func Classify(err error) (kind Kind, retryAfter time.Duration, status string) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, e.RetryAfter, e.Status
	}
	return KindIndeterminate, 0, ""
}

// callSender runs Send and turns a panic into an indeterminate error: a panic may come after the
// provider acted. Its error's text is made storable (storableErr).
func callSender(ctx context.Context, s Sender, d Delivery) (r Receipt, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = Receipt{}, Indeterminate(fmt.Errorf("sender panicked: %v", p))
		}
		err = storableErr(err)
	}()
	return s.Send(ctx, d)
}

// callReconciler runs Lookup, turning a panic into an error ("could not tell"). Its error's text
// is made storable (storableErr).
func callReconciler(ctx context.Context, rc Reconciler, d Delivery) (r Receipt, found bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, found, err = Receipt{}, false, fmt.Errorf("reconciler panicked: %v", p)
		}
		err = storableErr(err)
	}()
	return rc.Lookup(ctx, d)
}

// storableText is provider text (an error, a status, a receipt id) as the engine records it:
// NUL bytes and bytes that are not UTF-8 replaced with U+FFFD. A provider may send either (a
// receiver's {"id":"a\u0000b"}, a reason phrase in Latin-1), and Postgres text refuses both: an
// outcome that could not be recorded would leave the delivery to be sent again.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// storableErr is err with storable text (storableText); it still wraps err, so Classify and
// errors.Is see what the provider said.
func storableErr(err error) error {
	if err == nil {
		return nil
	}
	if msg := err.Error(); storableText(msg) != msg {
		return storableError{msg: storableText(msg), err: err}
	}
	return err
}

type storableError struct {
	msg string
	err error
}

func (e storableError) Error() string { return e.msg }
func (e storableError) Unwrap() error { return e.err }
