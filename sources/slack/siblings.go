package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/channels-dev/channels/sources"
)

// One Slack app installed in several workspaces has one Events request URL, one interactivity
// URL, and one app-level token whose Socket Mode connections Slack spreads envelopes over. So an
// instance receives the other installations' envelopes too (classified foreign-workspace). When
// the installation they belong to runs as another instance of the same app in this process, the
// envelope is handed to that instance — its classification, its principal's Sink — and
// acknowledged through the connection it came by; only an envelope no instance here owns is
// counted as foreign non-work. An instance is listed from the start of its Run: while one is
// still learning who it is (auth.test), an envelope no identified instance owns may be its
// installation's, and is left unacknowledged so Slack delivers it again, instead of being
// counted and acknowledged as no one's (and lost).

// reasonForeign is the non-work reason of another installation's envelope.
const reasonForeign = "foreign-workspace"

// apps are the running instances of each Slack app in this process, by appKey.
var apps = struct {
	sync.Mutex
	m map[string][]*Source
}{m: map[string][]*Source{}}

// appKey names the app s belongs to: a digest of the secret every installation of one app
// shares (its signing secret in Events API mode, its app-level token in Socket Mode).
func (s *Source) appKey() string {
	kind, secret := "events:", s.opt.signingSecret
	if s.opt.appToken != "" {
		kind, secret = "socket:", s.opt.appToken
	}
	sum := sha256.Sum256([]byte(secret))
	return kind + hex.EncodeToString(sum[:])
}

// joinApp lists s among its app's running instances until leave is called. Run joins before s
// knows its bot: the others then know an instance of the app is starting (see routeForeign).
func (s *Source) joinApp() (leave func()) {
	key := s.appKey()
	apps.Lock()
	apps.m[key] = append(apps.m[key], s)
	apps.Unlock()
	return func() {
		apps.Lock()
		defer apps.Unlock()
		list := apps.m[key]
		for i, o := range list {
			if o == s {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(apps.m, key)
		} else {
			apps.m[key] = list
		}
	}
}

// settleEnvelope settles v, s's verdict on the envelope raw (read with classify), and reports
// whether the envelope may be acknowledged. Another installation's envelope is settled by the
// instance of the same app in this process that owns it, if one does (routeForeign); otherwise
// by s, as counted non-work.
func (s *Source) settleEnvelope(ctx context.Context, sink *sources.Sink, v verdict, raw []byte, classify func(*Source, []byte) verdict) bool {
	if v.nonWork == reasonForeign {
		if taken, settled := s.routeForeign(ctx, raw, classify); taken {
			return settled
		}
	}
	return s.settle(ctx, sink, v)
}

// routeForeign hands raw, an envelope s classified as another installation's, to the instance of
// the same app in this process that owns it, if one does: classify is how s read it. taken
// reports that one did, or may (an instance still learning who it is); settled, that it
// accepted, counted or recorded it (so the envelope may be acknowledged). An envelope no
// identified instance owns while another is still starting is taken and not settled: the Events
// request is answered 503 and a Socket Mode envelope is not acked, so Slack delivers it again,
// by when the starting instance may know it is its own.
func (s *Source) routeForeign(ctx context.Context, raw []byte, classify func(*Source, []byte) verdict) (taken, settled bool) {
	apps.Lock()
	siblings := append([]*Source(nil), apps.m[s.appKey()]...)
	apps.Unlock()
	starting := false
	for _, o := range siblings {
		if o == s {
			continue
		}
		if o.bot.Load() == nil {
			starting = true // not identified: nothing of it (classify, Sink) is used yet
			continue
		}
		v := classify(o, raw)
		if v.nonWork == reasonForeign {
			continue
		}
		sink := o.sink.Load()
		if sink == nil {
			return true, false // stopping: left unacknowledged, Slack delivers it again
		}
		return true, o.settle(ctx, sink, v)
	}
	return starting, false
}
