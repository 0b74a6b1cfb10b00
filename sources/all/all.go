// Package all registers every native source. Import it for its side effect:
//
//	import _ "github.com/channels-dev/channels/sources/all"
//
// GitHub and email join this list when they are built (their matrix rows say status: planned
// until then).
package all

import (
	// The Slack source: Events API and Socket Mode.
	_ "github.com/channels-dev/channels/sources/slack"
	// The signed-webhook source.
	_ "github.com/channels-dev/channels/sources/webhook"
)
