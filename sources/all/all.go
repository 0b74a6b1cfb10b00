// Package all registers every native source. Import it for its side effect:
//
//	import _ "github.com/channels-dev/channels/sources/all"
//
// Slack, GitHub and email join this list when they are built (their matrix rows say
// status: planned until then).
package all

import (
	// The signed-webhook source.
	_ "github.com/channels-dev/channels/sources/webhook"
)
