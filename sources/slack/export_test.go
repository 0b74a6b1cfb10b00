package slack

import (
	"time"

	"github.com/channels-dev/channels/sources"
)

// OnSettle tells fn, for every envelope a Socket Mode instance handles, whether it acked it. The
// kit's driver uses it to know when "unacked" is the final answer instead of waiting out a timer.
func OnSettle(src sources.Source, fn func(envelopeID string, acked bool)) {
	src.(*SocketSource).settled = fn
}

// Classify is classify, for the table test of Send's typed failures.
var Classify = classify

// RenderMessage is renderMessage, for the rendering table tests.
var RenderMessage = renderMessage

// SetAPITimeout sets how long a Web API call of the instances made from now on may take, and
// returns the function that restores it.
func SetAPITimeout(d time.Duration) (restore func()) {
	old := apiTimeout
	apiTimeout = d
	return func() { apiTimeout = old }
}
