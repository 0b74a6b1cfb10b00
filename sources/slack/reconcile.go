package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/channels-dev/channels/sources"
)

// repliesPage is how many messages one conversations.replies call asks for (Slack's maximum is
// 1000; 200 is its recommendation).
const repliesPage = 200

// Lookup implements sources.Reconciler: after a crash left d in "sending", it reads the task's
// thread with conversations.replies (include_all_metadata), page by page by cursor to the end —
// no page cap — and finds our bot's messages whose metadata carries d's delivery ID. It reports
// found only when every part of the delivery is there; a split answer with parts missing is not
// found, and Send resumes it, posting only the missing parts. For "handled" it reads the
// message's reactions (reactions.get) for ours.
func (s *Source) Lookup(ctx context.Context, d sources.Delivery) (sources.Receipt, bool, error) {
	loc, err := decodeLocator(d.Locator)
	if err != nil {
		return sources.Receipt{}, false, fmt.Errorf("slack lookup %s: %w", d.ID, err)
	}
	bot, err := s.identity(ctx)
	if err != nil {
		// A 429 from auth.test waits as Slack asks, as the reads below do.
		return sources.Receipt{}, false, readFailure(fmt.Errorf("slack lookup %s: %w", d.ID, err))
	}
	if d.Operation == OpHandled {
		item, err := s.api.GetReactionsContext(ctx, slack.NewRefToMessage(loc.Channel, loc.TS), slack.GetReactionsParameters{Full: true})
		if err != nil {
			return sources.Receipt{}, false, readFailure(fmt.Errorf("slack lookup %s: reactions.get: %w", d.ID, err))
		}
		for _, r := range item.Reactions {
			if r.Name == s.opt.HandledReaction && slices.Contains(r.Users, bot.UserID) {
				return sources.Receipt{ProviderID: reactionID(loc, s.opt.HandledReaction)}, true, nil
			}
		}
		return sources.Receipt{}, false, nil
	}
	parts, total, err := s.scanThread(ctx, loc, bot, d.ID)
	if err != nil {
		return sources.Receipt{}, false, readFailure(fmt.Errorf("slack lookup %s: %w", d.ID, err))
	}
	if total == 0 || len(parts) < total || parts[total] == "" {
		return sources.Receipt{}, false, nil
	}
	return sources.Receipt{ProviderID: AnchorID(loc.Channel, parts[total])}, true, nil
}

// findParts returns the parts of delivery id already in the thread, by part number.
func (s *Source) findParts(ctx context.Context, loc Locator, id string) (map[int]string, error) {
	bot, err := s.identity(ctx)
	if err != nil {
		return nil, err
	}
	parts, _, err := s.scanThread(ctx, loc, bot, id)
	return parts, err
}

// scanThread pages the whole thread and returns the ts of each part of delivery id posted by our
// bot, and the number of parts the delivery has (0 if none was found).
//
// A scan Slack rate-limits on a later page does not start again at page 1: how far it got (the
// next page's cursor and the parts found so far) is kept in memory, and the delivery's next scan
// — after the engine waited out Retry-After — goes on from there. With a strict
// conversations.replies limit (one call a minute, 15 messages a page) every try then reads one
// more page instead of the first one again. Messages posted since are later in the thread, so
// the pages already read need no second read.
func (s *Source) scanThread(ctx context.Context, loc Locator, bot *botIdentity, id string) (map[int]string, int, error) {
	key := id + "\x00" + loc.Channel + "\x00" + loc.ThreadTS
	sc, resumed := s.scans.take(key, s.now())
	if !resumed {
		sc = &scan{parts: map[int]string{}, page: 1}
	}
	for ; ; sc.page++ {
		msgs, hasMore, next, err := s.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: loc.Channel, Timestamp: loc.ThreadTS, Cursor: sc.cursor, Limit: repliesPage, IncludeAllMetadata: true,
		})
		if err != nil {
			if _, limited := errors.AsType[*slack.RateLimitedError](err); limited {
				s.scans.keep(key, sc, s.now())
			}
			return nil, 0, fmt.Errorf("conversations.replies page %d: %w", sc.page, err)
		}
		for _, m := range msgs {
			ours := (bot.BotID != "" && m.BotID == bot.BotID) || (m.User != "" && m.User == bot.UserID)
			if !ours || m.Metadata.EventType != MetadataEventType || fmt.Sprint(m.Metadata.EventPayload["delivery_id"]) != id {
				continue
			}
			part, n := number(m.Metadata.EventPayload["part"]), number(m.Metadata.EventPayload["parts"])
			sc.parts[max(part, 1)] = m.Timestamp
			sc.total = max(sc.total, n, 1)
		}
		if !hasMore || next == "" {
			return sc.parts, sc.total, nil
		}
		sc.cursor = next
	}
}

// scan is how far a thread scan got: the cursor of the next page to read (its number is page)
// and the parts found on the pages before it.
type scan struct {
	cursor string
	page   int
	parts  map[int]string
	total  int
	at     time.Time // when it was kept
}

// scanProgress keeps the progress of rate-limited scans, by delivery, thread, for scanKeep; at
// most maxKeptScans of them (beyond that a scan starts again at page 1, as without it).
type scanProgress struct {
	mu sync.Mutex
	m  map[string]*scan
}

const (
	scanKeep     = time.Hour // the longest Retry-After the delivery engine waits by default
	maxKeptScans = 1024
)

// take removes and returns the kept progress of key, if there is one still fresh.
func (p *scanProgress) take(key string, now time.Time) (*scan, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sc, ok := p.m[key]
	delete(p.m, key)
	if !ok || now.Sub(sc.at) > scanKeep {
		return nil, false
	}
	return sc, true
}

// keep stores the progress of key's scan, dropping what has gone stale.
func (p *scanProgress) keep(key string, sc *scan, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*scan{}
	}
	for k, old := range p.m {
		if now.Sub(old.at) > scanKeep {
			delete(p.m, k)
		}
	}
	if len(p.m) >= maxKeptScans {
		return
	}
	sc.at = now
	p.m[key] = sc
}

// number reads a metadata number (JSON numbers decode as float64; Slack may return strings).
func number(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case json.Number:
		i, _ := n.Int64()
		return int(i)
	case string:
		i, _ := strconv.Atoi(n)
		return i
	case int:
		return n
	}
	return 0
}

// identity returns the bot's identity, asking auth.test once if Run has not learned it yet (the
// delivery engine may call Send or Lookup before or without Run).
func (s *Source) identity(ctx context.Context) (*botIdentity, error) {
	if b := s.bot.Load(); b != nil {
		return b, nil
	}
	r, err := s.api.AuthTestContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("auth.test: %w", err)
	}
	if r.UserID == "" {
		return nil, errors.New("auth.test returned no user id")
	}
	s.bot.CompareAndSwap(nil, identityOf(r))
	return s.bot.Load(), nil
}
