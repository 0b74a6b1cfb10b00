-- Fills a migrated Channels SQLite store (channels migrate first) with ~200k tasks over 90 days (4 principals, 20k thread
-- contexts + 200 long-lived channel contexts), 800k task events, 1M evidence, 200k done claims,
-- 200k wakes, 100k deliveries (+attempts), 20k lanes, 10k push configs, 50k anchors.
PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-400000; PRAGMA temp_store=MEMORY;
CREATE TEMP TABLE p AS SELECT CAST(strftime('%s','now') AS INTEGER)*1000000 AS now, 90*86400*1000000 AS span, 200000 AS n;
CREATE TEMP TABLE g(i INTEGER PRIMARY KEY);
WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM r WHERE i < 199999) INSERT INTO g SELECT i FROM r;
CREATE TEMP TABLE tk AS SELECT i,
  'p' || ((i/10) % 4) AS principal,
  printf('0190%08x-7000-8000-%012x', i, (i*2654435761) % 281474976710656) AS id,
  CASE WHEN i % 10 = 0 THEN 'ch-' || ((i/10) % 200) ELSE 'th-' || (i/10) END AS ctx,
  CASE i % 3 WHEN 0 THEN 'slack' WHEN 1 THEN 'webhook' ELSE 'a2a' END AS source,
  CASE WHEN i >= 199850 THEN (CASE i % 4 WHEN 0 THEN 'working' WHEN 1 THEN 'input-required' WHEN 2 THEN 'submitted' ELSE 'completed' END)
       WHEN i % 50 = 1 THEN 'failed' WHEN i % 100 = 3 THEN 'canceled' ELSE 'completed' END AS state,
  (SELECT now - span FROM p) + i * ((SELECT span FROM p) / 200000) AS ts
FROM g;
INSERT INTO tasks SELECT principal, id, ctx, source, state, ts, 4, 4, randomblob(1000), ts - 5000000, ts FROM tk;
INSERT INTO contexts SELECT principal, ctx, source, ctx, MIN(ts), MAX(ts) FROM tk GROUP BY principal, ctx;
UPDATE contexts SET last_event_at = (SELECT now FROM p) - 60000000 WHERE id LIKE 'ch-%';
INSERT INTO task_events SELECT principal, id, s.seq, CASE s.seq WHEN 1 THEN 'task' WHEN 4 THEN 'status' ELSE 'status' END, randomblob(200), ts + s.seq
  FROM tk, (SELECT 1 AS seq UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) s;
INSERT INTO claims SELECT principal, source, 'ev-' || i, 'v3:' || hex(randomblob(32)), 'done', 'task', id, ctx, NULL, ts - 5000000, ts - 5000000 FROM tk;
INSERT INTO anchors SELECT principal, source, 'msg-' || i, id, 3, ts FROM tk WHERE i % 4 = 0;
INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)
  SELECT principal, source,
    CASE j WHEN 0 THEN 'accepted' WHEN 1 THEN 'woken' WHEN 2 THEN 'delivery-delivered'
      WHEN 3 THEN (CASE WHEN i % 500 = 0 THEN 'delivery-ambiguous' WHEN i % 7 = 0 THEN 'anchor-miss' ELSE 'duplicate' END)
      ELSE (CASE WHEN i % 100 = 0 THEN 'non-work' ELSE 'settled' END) END,
    id, CAST('{"identity":"ev-' || i || '","count":1,"reason":"x"}' AS BLOB), ts + j
  FROM tk, (SELECT 0 AS j UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) jj ORDER BY i, j;
INSERT INTO wakes (id, principal, task_id, activation, state, attempts, detail, created_at, updated_at, lease_owner, lease_until, due_at)
  SELECT 'w-' || i, principal, id, 1, CASE WHEN state IN ('working') THEN 'active' WHEN state = 'submitted' THEN 'pending' ELSE 'done' END, 1, '', ts - 4000000, ts,
   '', -62135596800000000, -62135596800000000 FROM tk ORDER BY i;
INSERT INTO deliveries SELECT principal, 'd-' || i, id, CASE WHEN source = 'a2a' THEN 'slack' ELSE source END, 'post', 'lookup', 'lane-' || ctx,
   hex(randomblob(16)), randomblob(300),
   CASE WHEN i % 20000 = 4 THEN 'ambiguous' WHEN i % 1000 = 2 THEN 'failed' ELSE 'delivered' END,
   1, 0, ts, '', -62135596800000000, 'prov-' || i, '', ts, ts + 1000000
  FROM tk WHERE i % 2 = 0;
INSERT INTO delivery_attempts (principal, delivery_id, attempt, kind, outcome, error, provider_status, retry_after_ms, owner, created_at)
  SELECT principal, 'd-' || i, 1, 'send', 'delivered', '', '200', 0, 'eng', ts + 1000000 FROM tk WHERE i % 2 = 0 ORDER BY i;
INSERT INTO delivery_lanes SELECT principal, 'lane-' || ctx, MAX(ts) + 1000000, MAX(ts) FROM tk WHERE i % 2 = 0 GROUP BY principal, ctx;
INSERT INTO push_configs SELECT principal, id, 'pc-' || i, 'https://example.com/hook', 'tok', '', '', 'reg-' || i, 4, NULL, '', ts, ts, CASE WHEN state IN ('completed', 'failed', 'canceled', 'rejected') THEN 'reg-' || i ELSE '' END FROM tk WHERE i % 20 = 0;
-- No ANALYZE: the store runs none, so its plans are those of a store without statistics.
