-- 0011_wake_counts_at_commit: the live wake counts (0005) are written once per transaction, at its
-- commit, instead of at every change of a wake.
--
-- 0005's triggers updated the transaction's slot row of wake_counts at each wake they counted, so a
-- transaction held that row locked from its first wake to its commit. A group commit runs dozens
-- of acceptances in one transaction, tens of milliseconds; any other transaction whose id fell on
-- the same slot (a claimer, a turn's last update) waited for all of it, and the group in turn
-- waited for theirs. Measured with pg_stat_statements under `channels bench accept` (20,000
-- events, concurrency 64): the wake insert took 183 µs on average (11 µs at best, 63 ms at worst)
-- and the counter update inside it 56 µs, a third of the acceptance's server time.
--
-- Now a row trigger adds the change to two transaction-local settings, channels.wake_pending and
-- channels.wake_active, which a rolled-back savepoint restores along with its writes; a deferred
-- constraint trigger, at commit, adds them to the slot row once and zeroes them. The slot row is
-- locked only while the transaction commits. A count read inside the transaction adds the
-- settings to the slots' sums (CountWakes), so it still sees the transaction's own wakes. One
-- transaction writes the wakes of one schema (one Store), so the settings need no schema in their
-- names.
--
-- Writers of wakes wait until this migration commits, so every change of a wake is counted by the
-- old triggers or by the new ones, never by both or neither. The lock is the one DROP TRIGGER
-- takes, from the start: a weaker one taken first would be raised while an older process's
-- transaction that has read a wake (a turn's GetWake, FOR UPDATE) waits to write it, a deadlock.
LOCK TABLE wakes IN ACCESS EXCLUSIVE MODE;

DROP TRIGGER wakes_count_insert ON wakes;
DROP TRIGGER wakes_count_update ON wakes;
DROP TRIGGER wakes_count_delete ON wakes;
DROP FUNCTION wake_counts_track();

-- The functions name their table with the schema they were made in (see 0005).
DO $migration$
BEGIN
	EXECUTE format($fn$
		CREATE FUNCTION %1$I.wake_counts_note() RETURNS trigger LANGUAGE plpgsql AS $body$
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
			IF dp <> 0 THEN
				PERFORM set_config('channels.wake_pending',
					(coalesce(nullif(current_setting('channels.wake_pending', true), ''), '0')::bigint + dp)::text, true);
			END IF;
			IF da <> 0 THEN
				PERFORM set_config('channels.wake_active',
					(coalesce(nullif(current_setting('channels.wake_active', true), ''), '0')::bigint + da)::text, true);
			END IF;
			RETURN NULL;
		END
		$body$
	$fn$, current_schema());
	EXECUTE format($fn$
		CREATE FUNCTION %1$I.wake_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $body$
		DECLARE
			dp bigint := coalesce(nullif(current_setting('channels.wake_pending', true), ''), '0')::bigint;
			da bigint := coalesce(nullif(current_setting('channels.wake_active', true), ''), '0')::bigint;
		BEGIN
			IF dp <> 0 OR da <> 0 THEN
				UPDATE %1$I.wake_counts SET pending = pending + dp, active = active + da
					WHERE slot = (txid_current() %% 64)::integer;
				PERFORM set_config('channels.wake_pending', '0', true);
				PERFORM set_config('channels.wake_active', '0', true);
			END IF;
			RETURN NULL;
		END
		$body$
	$fn$, current_schema());
END
$migration$;

CREATE TRIGGER wakes_count_insert AFTER INSERT ON wakes
	FOR EACH ROW WHEN (NEW.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_note();
CREATE TRIGGER wakes_count_update AFTER UPDATE OF state ON wakes
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION wake_counts_note();
CREATE TRIGGER wakes_count_delete AFTER DELETE ON wakes
	FOR EACH ROW WHEN (OLD.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_note();

-- At commit, each counted change's event runs the apply; the first adds the whole transaction's
-- change and the rest find nothing to add.
CREATE CONSTRAINT TRIGGER wakes_count_insert_apply AFTER INSERT ON wakes
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_apply();
CREATE CONSTRAINT TRIGGER wakes_count_update_apply AFTER UPDATE OF state ON wakes
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION wake_counts_apply();
CREATE CONSTRAINT TRIGGER wakes_count_delete_apply AFTER DELETE ON wakes
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IN ('pending', 'active')) EXECUTE FUNCTION wake_counts_apply();
