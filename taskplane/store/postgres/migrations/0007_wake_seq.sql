-- 0007_wake_seq: wakes of one created_at in the order they were admitted. The queue ordered them by
-- (created_at, id), so wakes stamped with one time (one clock reading, or one microsecond) were
-- listed and claimed in the order of their ids, which are random, not first in, first out. seq is
-- the insertion order, as in the SQLite store; the queue orders by (created_at, seq).
--
-- The wakes already stored are numbered in the order they were served in until now, (created_at,
-- id), before seq becomes an identity column (whose values cannot be updated); the identity then
-- continues after them. ALTER TABLE holds wakes locked until this migration commits, so no wake is
-- written in between. An older process still running on this schema inserts wakes without naming
-- seq, which the identity fills in.
ALTER TABLE wakes ADD COLUMN seq bigint;
UPDATE wakes w SET seq = o.n
	FROM (SELECT principal, id, row_number() OVER (ORDER BY created_at, id) AS n FROM wakes) o
	WHERE w.principal = o.principal AND w.id = o.id;
ALTER TABLE wakes ALTER COLUMN seq SET NOT NULL;
ALTER TABLE wakes ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval(pg_get_serial_sequence('wakes', 'seq'), (SELECT count(*) FROM wakes) + 1, false);

-- The indexes the queue reads in order, rebuilt in the new order.
DROP INDEX wakes_state_created;
CREATE INDEX wakes_state_created ON wakes (state, created_at, seq);
DROP INDEX wakes_live;
CREATE INDEX wakes_live ON wakes (created_at, seq) WHERE state IN ('pending', 'active');
