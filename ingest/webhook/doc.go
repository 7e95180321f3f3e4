// Package webhook is inboxd's webhook source for inboxd.Config.Sources:
// New(Config), signed HTTP requests (standard-webhooks, GitHub, HMAC, or
// unsigned) on a listener of its own, each verified request persisted as
// a row before it is answered 200. Its sources are SourceConfig values (the
// daemon reads them from its webhook sources file, INBOXD_WEBHOOK_SOURCES,
// with internal/opfiles/webhookfile). It links no
// broker client. docs/webhooks.md describes the listener, the schemes and
// the budgets.
package webhook
