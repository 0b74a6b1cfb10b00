-- 0005_wake_counts: live wakes counted by triggers, so the admission bound costs one small read.
--
-- Every acceptance counts the pending wakes (at most the bound, 128). Counting them in wakes
-- walked each index entry a pending wake ever left behind: a wake that leaves 'pending' leaves a
-- dead entry under 'pending' until vacuum, and the bounded count visited all of them (a bitmap
-- scan, which never marks them dead). Measured on a fresh database under `channels bench accept`
-- (20,000 events, concurrency 64): 588 µs per count, more server time than all the acceptance's
-- writes together.
--
-- wake_counts holds 64 slots; the sum of a column over them is the number of wakes in that state.
-- A transaction adds to the slot of its transaction id, so concurrent transactions seldom wait on
-- one another's slot (its row lock is held until commit), and one transaction only ever locks one
-- slot row, whatever states it moves wakes between. Only 'pending' and 'active' are counted; other
-- states are counted in wakes itself. fillfactor 10 keeps each page nearly empty, so Postgres
-- prunes the dead versions the updates leave while a page is still small to read.
CREATE TABLE wake_counts (
	slot    integer PRIMARY KEY,
	pending bigint  NOT NULL DEFAULT 0,
	active  bigint  NOT NULL DEFAULT 0
) WITH (fillfactor = 10);

-- Writers of wakes (another process, during a rolling upgrade) wait until this migration commits:
-- a wake written between the count below and the triggers' creation would be in neither.
LOCK TABLE wakes IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO wake_counts (slot) SELECT generate_series(0, 63);
UPDATE wake_counts SET
	pending = (SELECT count(*) FROM wakes WHERE state = 'pending'),
	active  = (SELECT count(*) FROM wakes WHERE state = 'active')
WHERE slot = 0;

-- The function names its table with the schema it was made in (a trigger runs with the search_path
-- of whoever changed wakes, which may name another store's schema).
DO $migration$
BEGIN
	EXECUTE format($fn$
		CREATE FUNCTION %1$I.wake_counts_track() RETURNS trigger LANGUAGE plpgsql AS $body$
		DECLARE
			dp bigint := 0;
			da bigint := 0;
		BEGIN
			IF TG_OP IN ('UPDATE', 'DELETE') THEN
				IF OLD.state = 'pending' THEN dp := dp - 1; ELSIF OLD.state = 'active' THEN da := da - 1; END IF;
			END IF;
			IF TG_OP IN ('UPDATE', 'INSERT') THEN
				IF NEW.state = 'pending' THEN dp := dp + 1; ELSIF NEW.state = 'active' THEN da := da + 1; END IF;
			END IF;
			IF dp <> 0 OR da <> 0 THEN
				UPDATE %1$I.wake_counts SET pending = pending + dp, active = active + da
					WHERE slot = (txid_current() %% 64)::integer;
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
