-- The data of fill-sqlite.sql, for a migrated Channels Postgres store (run VACUUM ANALYZE after it).
SET synchronous_commit = off;
CREATE TEMP TABLE tk AS SELECT i,
  'p' || ((i/10) % 4) AS principal,
  '0190' || lpad(to_hex(i), 8, '0') || '-7000-8000-' || lpad(to_hex((i::bigint*2654435761) % 281474976710656), 12, '0') AS id,
  CASE WHEN i % 10 = 0 THEN 'ch-' || ((i/10) % 200) ELSE 'th-' || (i/10) END AS ctx,
  CASE i % 3 WHEN 0 THEN 'slack' WHEN 1 THEN 'webhook' ELSE 'a2a' END AS source,
  CASE WHEN i >= 199850 THEN (CASE i % 4 WHEN 0 THEN 'working' WHEN 1 THEN 'input-required' WHEN 2 THEN 'submitted' ELSE 'completed' END)
       WHEN i % 50 = 1 THEN 'failed' WHEN i % 100 = 3 THEN 'canceled' ELSE 'completed' END AS state,
  now() - interval '90 days' + i * (interval '90 days' / 200000) AS ts
FROM generate_series(0, 199999) i;
INSERT INTO tasks SELECT principal, id, ctx, source, state, ts, 4, 4, decode(repeat(md5(i::text), 32), 'hex') || gen_random_uuid()::text::bytea, ts - interval '5 s', ts FROM tk;
INSERT INTO contexts SELECT principal, ctx, min(source), ctx, min(ts), max(ts) FROM tk GROUP BY principal, ctx;
UPDATE contexts SET last_event_at = now() - interval '1 min' WHERE id LIKE 'ch-%';
INSERT INTO task_events SELECT principal, id, s, 'status', decode(repeat(md5((i*4+s)::text), 6), 'hex') || gen_random_uuid()::text::bytea, ts + s * interval '1 us' FROM tk, generate_series(1,4) s;
INSERT INTO claims SELECT principal, source, 'ev-' || i, 'v3:' || md5(i::text) || md5((i+1)::text), 'done', 'task', id, ctx, NULL, ts - interval '5 s', ts - interval '5 s' FROM tk;
INSERT INTO anchors SELECT principal, source, 'msg-' || i, id, 3, ts FROM tk WHERE i % 4 = 0;
INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)
  SELECT principal, source,
    CASE j WHEN 0 THEN 'accepted' WHEN 1 THEN 'woken' WHEN 2 THEN 'delivery-delivered'
      WHEN 3 THEN (CASE WHEN i % 500 = 0 THEN 'delivery-ambiguous' WHEN i % 7 = 0 THEN 'anchor-miss' ELSE 'duplicate' END)
      ELSE (CASE WHEN i % 100 = 0 THEN 'non-work' ELSE 'settled' END) END,
    id, convert_to('{"identity":"ev-' || i || '","count":1,"reason":"x"}', 'UTF8'), ts + j * interval '1 us'
  FROM tk, generate_series(0,4) j ORDER BY i, j;
INSERT INTO wakes (principal, id, task_id, activation, state, attempts, detail, created_at, updated_at)
  SELECT principal, 'w-' || i, id, 1, CASE WHEN state = 'working' THEN 'active' WHEN state = 'submitted' THEN 'pending' ELSE 'done' END, 1, '', ts - interval '4 s', ts FROM tk ORDER BY i;
INSERT INTO deliveries SELECT principal, 'd-' || i, id, CASE WHEN source = 'a2a' THEN 'slack' ELSE source END, 'post', 'lookup', 'lane-' || ctx,
   md5(i::text), decode(repeat(md5(i::text), 9), 'hex') || gen_random_uuid()::text::bytea,
   CASE WHEN i % 20000 = 4 THEN 'ambiguous' WHEN i % 1000 = 2 THEN 'failed' ELSE 'delivered' END,
   1, 0, ts, '', '0001-01-01 00:00:00+00', 'prov-' || i, '', ts, ts + interval '1 s'
  FROM tk WHERE i % 2 = 0;
INSERT INTO delivery_attempts (principal, delivery_id, attempt, kind, outcome, error, provider_status, retry_after_ms, owner, created_at)
  SELECT principal, 'd-' || i, 1, 'send', 'delivered', '', '200', 0, 'eng', ts + interval '1 s' FROM tk WHERE i % 2 = 0 ORDER BY i;
INSERT INTO delivery_lanes SELECT principal, 'lane-' || ctx, max(ts) + interval '1 s', max(ts) FROM tk WHERE i % 2 = 0 GROUP BY principal, ctx;
INSERT INTO push_configs SELECT principal, id, 'pc-' || i, 'https://example.com/hook', 'tok', '', '', 'reg-' || i, 4, NULL, '', ts, ts, CASE WHEN state IN ('completed', 'failed', 'canceled', 'rejected') THEN 'reg-' || i ELSE '' END FROM tk WHERE i % 20 = 0;
