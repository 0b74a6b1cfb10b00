package main

import (
	"log/slog"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
)

// newPushNotifier returns the push-notification notifier of serve, or nil when
// push_notifications is off. serve runs it beside the dispatcher.
func newPushNotifier(plane *taskplane.Plane, cfg config.Config, log *slog.Logger) *push.Notifier {
	if !cfg.PushNotifications {
		return nil
	}
	if cfg.PushAllowPrivateNetworks {
		log.Warn("push: webhooks may use http and private or loopback addresses (push_allow_private_networks); use this for development and tests only")
	}
	return push.New(plane, push.Options{
		AllowPrivateNetworks: cfg.PushAllowPrivateNetworks,
		Timeout:              cfg.PushTimeout,
		Logger:               log,
	})
}

// withPush offers push notifications through n on the A2A server (nothing when n is nil).
func withPush(n *push.Notifier) func(*a2ahttp.Config) {
	return func(c *a2ahttp.Config) {
		if n != nil {
			c.Push = n
		}
	}
}
