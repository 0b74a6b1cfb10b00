-- 0005_wake_counts: live wakes counted by triggers, so the admission bound costs one small read.
--
-- Every acceptance counts the pending wakes (at most the bound, 128). Counting them in wakes
-- walked each index entry a pending wake ever left behind: a wake that leaves 'pending' leaves a
-- dead entry under 'pending' until vacuum, and the bounded count visited all of them (a bitmap
-- scan, which never marks them dead). Measured on a fresh database under `channels bench accept`
-- (20,000 events, concurrency 64): 588 µs per count, more server time than all the acceptance's
-- writes together.
--
-- wake_counts holds, per live state, 64 slots whose sum is the number of wakes in that state. A
-- transaction adds to the slot of its transaction id, so concurrent transactions seldom wait on
-- one another's counter row (a row lock is held until commit). Only 'pending' and 'active' are
-- counted; other states are counted in wakes itself.
CREATE TABLE wake_counts (
	state text    NOT NULL,
	slot  integer NOT NULL,
	n     bigint  NOT NULL,
	PRIMARY KEY (state, slot)
) WITH (fillfactor = 10);

INSERT INTO wake_counts (state, slot, n)
	SELECT state, 0, count(*) FROM wakes WHERE state IN ('pending', 'active') GROUP BY state;

-- The function names its table with the schema it was made in (a trigger runs with the search_path
-- of whoever changed wakes, which may name another store's schema).
DO $migration$
BEGIN
	EXECUTE format($fn$
		CREATE FUNCTION %1$I.wake_counts_track() RETURNS trigger LANGUAGE plpgsql AS $body$
		DECLARE
			s integer := (txid_current() %% 64)::integer;
		BEGIN
			IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state IN ('pending', 'active') THEN
				INSERT INTO %1$I.wake_counts AS c (state, slot, n) VALUES (OLD.state, s, -1)
					ON CONFLICT (state, slot) DO UPDATE SET n = c.n - 1;
			END IF;
			IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.state IN ('pending', 'active') THEN
				INSERT INTO %1$I.wake_counts AS c (state, slot, n) VALUES (NEW.state, s, 1)
					ON CONFLICT (state, slot) DO UPDATE SET n = c.n + 1;
			END IF;
			RETURN NULL;
		END
		$body$
	$fn$, current_schema());
END
$migration$;

CREATE TRIGGER wakes_count_insert AFTER INSERT ON wakes
	FOR EACH ROW WHEN (NEW.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_track();
CREATE TRIGGER wakes_count_update AFTER UPDATE OF state ON wakes
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION wake_counts_track();
CREATE TRIGGER wakes_count_delete AFTER DELETE ON wakes
	FOR EACH ROW WHEN (OLD.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_track();
