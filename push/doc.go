// Package push delivers A2A push notifications: for every push-notification config of a task
// (registered with CreateTaskPushNotificationConfig or a send's
// configuration.taskPushNotificationConfig), an HTTP POST to the config's webhook for the task as
// it was at registration and then for every status change and artifact update, in order.
//
// # What a receiver gets
//
// Each notification is one POST whose body is one A2A StreamResponse in HTTP+JSON wire form
// ({"task":…}, {"statusUpdate":…} or {"artifactUpdate":…}), with these headers:
//
//	Content-Type: application/a2a+json
//	Authorization: <scheme> <credentials>        the config's authentication, when it has one
//	A2A-Notification-Token: <token>              the config's token, when it has one
//	X-A2A-Notification-Token: <token>            the same, for receivers written for a2a-python
//	A2A-Notification-Id: <taskId>:<seq>          stable: the event's sequence in the task's log
//	A2A-Notification-Signature: t=<unix>,v1=<hex> HMAC-SHA256 keyed with the token (see Sign)
//	X-Channels-Delivery: dlv_…                   the delivery, as `channels deliveries list` shows it
//
// The snapshot sent at registration has the id "<taskId>:<seq>:task:<digest>" (12 hex digits of
// the body's SHA-256). A retry carries the same id
// and body (with a fresh signature timestamp), so a receiver that acts on each id once sees no
// duplicate effects. Verify checks the signature and the timestamp window; SeenIDs remembers ids.
// A config without a token gets no signature: register a token to be able to verify.
//
// # Delivery
//
// A Notifier follows each config's task event log from a durable cursor stored with the config
// (a restart resumes where it stopped) and makes each notification a delivery of the delivery
// engine (source "a2a-push", recovery class idempotent): its ID is fixed by (task, config,
// registration, sequence), every attempt is recorded with the delivery (its per-attempt rows,
// delivery.Engine.Attempts) and only its final outcome as evidence (delivery-delivered,
// delivery-failed or delivery-ambiguous), failures back off with a bounded number of attempts
// (DefaultPolicy), and each attempt is bounded by a timeout (DefaultTimeout, 15 s). A config's next notification is prepared only once the previous one
// has settled, so a receiver sees a task's events in order; a notification that exhausts its
// attempts is failed and the config moves on.
//
// # SSRF guard
//
// Guard checks a webhook at registration (CheckURL) and again at every attempt, after resolving
// its host, on the address it then connects to (DialContext); redirects are not followed and
// proxies are not used. Only https to public addresses is allowed unless the operator opts in
// (push_allow_private_networks), which admits http and loopback or private addresses for
// development and tests. See docs/push.md.
package push
