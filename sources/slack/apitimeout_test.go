package slack_test

import (
	"testing"
	"time"

	slacksrc "github.com/channels-dev/channels/sources/slack"
)

// A Slack Web API call that is never answered (a proxy holding the connection open) times out and
// is tried again: the instance's first auth.test, never answered, held it unidentified (and
// unhealthy) until shutdown.
func TestASlackCallNeverAnsweredTimesOutAndIsTriedAgain(t *testing.T) {
	defer slacksrc.SetAPITimeout(300 * time.Millisecond)()
	forEachMode(t, func(t *testing.T, mode string) {
		w := newWorkspace(t)
		w.authHang.Store(1)
		a := newApp(t, mode)
		a.start(w, "default", "alice")
		a.healthy("alice")
	})
}
