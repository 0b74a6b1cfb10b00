#!/usr/bin/env bash
# postgres.sh SERVER_URL — the ceiling of Postgres acceptances on a machine: the rows one
# acceptance of `channels bench accept` writes (its task, the task's first event, the evidence, the
# wake, the claim; the claim and context reads; the wake settled afterwards, as the bench's drainer
# does), on the store's own schema, sent by pgbench (a C client that costs the machine next to
# nothing), and nothing else: no plane, no digest, no JSON.
#
# SERVER_URL names a server and a user that may create databases, e.g.
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. A throwaway database is created,
# migrated with `channels migrate`, used and dropped.
#
# Forms, each run for DURATION seconds (default 15) with CLIENTS connections (default 4), for each
# group size in SIZES (default "32 64 128"):
#   rows   a transaction of GROUP acceptances, each in its own savepoint, statement by statement,
#          as the store's group commit runs them;
#   multi  a transaction of GROUP acceptances written with one statement per table.
# Each line gives acceptances per second (transactions per second × GROUP) and the share of the
# machine's CPU time left idle during the run.
#
#   go build -o /tmp/channels ./cmd/channels
#   CHANNELS=/tmp/channels scripts/writeceiling/postgres.sh 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
set -euo pipefail

server=${1:?usage: postgres.sh SERVER_URL}
channels=${CHANNELS:-channels}
duration=${DURATION:-15}
clients=${CLIENTS:-4}
sizes=${SIZES:-32 64 128}
forms=${FORMS:-rows multi}

db=writeceiling_$$
base=${server%%\?*}
base=${base%/*}
query=
[[ $server == *\?* ]] && query="?${server#*\?}"
dburl="$base/$db$query"
work=$(mktemp -d)
cleanup() {
	psql -q "$server" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

psql -q "$server" -c "CREATE DATABASE $db" >/dev/null
"$channels" migrate --store "$dburl" >/dev/null

body="decode(repeat('ab', 678), 'hex')"
event="decode(repeat('ab', 765), 'hex')"
detail="decode(repeat('ab', 85), 'hex')"
digest="'v3-efc62ff7dc1bc0f24f27c66e612b8116f6ea3fa02a4e0a6ac2fe6c25fb533072'"

# The 16 conversations of bench accept.
psql -q "$dburl" -c "INSERT INTO contexts (principal, id, source, conversation_key, created_at, last_event_at)
	SELECT 'bench', 'ctx' || g, 'bench', 'c' || g, now(), now() FROM generate_series(0, 15) g" >/dev/null
# Claims and settled wakes of earlier work, and statistics: on a table without them the planner
# reads a list of keys (the multi form's) as a filter over every row of the principal instead of
# as an index condition.
psql -q "$dburl" -c "INSERT INTO claims (principal, source, identity, state, created_at, updated_at)
	SELECT 'bench', 'bench', 'seed-' || g, 'done', now(), now() FROM generate_series(1, 20000) g" \
	-c "INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
	SELECT 'bench', 'seed-' || g, 'seed-' || g, 1, 'done', now(), now() FROM generate_series(1, 20000) g" \
	-c "ANALYZE" >/dev/null

# rows_script G: G acceptances in savepoints, then the drainer's transaction settling their wakes.
# pgbench variables are typed ::text: prepared statements need their types.
rows_script() {
	local g=$1 k id
	for ((k = 0; k < g; k++)); do
		echo "\\set n$k random(1, 1000000000000000)"
		echo "\\set c$k :n$k % 16"
	done
	echo "BEGIN;"
	for ((k = 0; k < g; k++)); do
		id="'x' || :client_id::text || '-' || :n$k::text"
		cat <<EOF
SAVEPOINT fn;
SELECT digest FROM claims WHERE principal = 'bench' AND source = 'bench' AND identity = 'i' || $id;
SELECT id, last_event_at FROM contexts WHERE principal = 'bench' AND source = 'bench' AND conversation_key = 'c' || :c$k::text FOR KEY SHARE;
INSERT INTO tasks (principal, id, context_id, source, state, status_time, version, last_seq, body, created_at, updated_at) VALUES ('bench', 't' || $id, 'ctx' || :c$k::text, 'bench', 'submitted', now(), 1, 1, $body, now(), now());
INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at) VALUES ('bench', 't' || $id, 1, 'task', $event, now());
INSERT INTO evidence (principal, source, kind, task_id, detail, created_at) VALUES ('bench', 'bench', 'accepted', 't' || $id, $detail, now());
INSERT INTO wakes (principal, id, task_id, activation, state, attempts, detail, lease_owner, lease_until, due_at, created_at, updated_at) VALUES ('bench', 'w' || $id, 't' || $id, 1, 'pending', 0, '', '', '0001-01-01', '0001-01-01', now(), now());
INSERT INTO claims (principal, source, identity, digest, state, outcome_kind, task_id, context_id, message, created_at, updated_at) VALUES ('bench', 'bench', 'i' || $id, $digest, 'done', 'task', 't' || $id, 'ctx' || :c$k::text, NULL, now(), now()) ON CONFLICT DO NOTHING;
RELEASE SAVEPOINT fn;
EOF
	done
	echo "COMMIT;"
	echo "BEGIN;"
	for ((k = 0; k < g; k++)); do
		echo "UPDATE wakes SET state = 'done', updated_at = now() WHERE principal = 'bench' AND id = 'w' || 'x' || :client_id::text || '-' || :n$k::text;"
	done
	echo "COMMIT;"
}

# list FORMAT G: FORMAT (a printf format of one %d) for 1..G, comma-separated. The group's keys
# are listed in the statement: a key array built by a subquery is not used as an index condition
# by a generic plan, which pgbench's prepared statements get.
list() {
	local k out=
	for ((k = 1; k <= $2; k++)); do
		out+="${out:+, }$(printf "$1" "$k")"
	done
	echo "$out"
}

# multi_script G: the same rows, one statement per table for the whole group.
multi_script() {
	local g=$1
	local id="'x' || :client_id::text || '-' || :n::text || '-' || g"
	local series="generate_series(1, $g) g"
	cat <<EOF
\\set n random(1, 1000000000000000)
BEGIN;
SELECT count(*) FROM claims WHERE principal = 'bench' AND source = 'bench' AND identity IN ($(list "'i' || 'x' || :client_id::text || '-' || :n::text || '-' || '%d'" "$g"));
SELECT count(*) FROM (SELECT id FROM contexts WHERE principal = 'bench' AND source = 'bench' FOR KEY SHARE) AS c;
INSERT INTO tasks (principal, id, context_id, source, state, status_time, version, last_seq, body, created_at, updated_at) SELECT 'bench', 't' || $id, 'ctx' || (g % 16), 'bench', 'submitted', now(), 1, 1, $body, now(), now() FROM $series;
INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at) SELECT 'bench', 't' || $id, 1, 'task', $event, now() FROM $series;
INSERT INTO evidence (principal, source, kind, task_id, detail, created_at) SELECT 'bench', 'bench', 'accepted', 't' || $id, $detail, now() FROM $series;
INSERT INTO wakes (principal, id, task_id, activation, state, attempts, detail, lease_owner, lease_until, due_at, created_at, updated_at) SELECT 'bench', 'w' || $id, 't' || $id, 1, 'pending', 0, '', '', '0001-01-01', '0001-01-01', now(), now() FROM $series;
INSERT INTO claims (principal, source, identity, digest, state, outcome_kind, task_id, context_id, message, created_at, updated_at) SELECT 'bench', 'bench', 'i' || $id, $digest, 'done', 'task', 't' || $id, 'ctx' || (g % 16), NULL, now(), now() FROM $series ON CONFLICT DO NOTHING;
COMMIT;
BEGIN;
UPDATE wakes SET state = 'done', updated_at = now() WHERE principal = 'bench' AND id IN ($(list "'w' || 'x' || :client_id::text || '-' || :n::text || '-' || '%d'" "$g"));
COMMIT;
EOF
}

# cpu prints the idle and total jiffies of the machine.
cpu() { awk '/^cpu /{ print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }

for g in $sizes; do
	for form in $forms; do
		"${form}_script" "$g" >"$work/$form-$g.sql"
		psql -q "$dburl" -c CHECKPOINT >/dev/null
		read -r idle0 total0 < <(cpu)
		tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$duration" -f "$work/$form-$g.sql" "$dburl" 2>"$work/pgbench.err" |
			awk '/^tps = /{ print $3 }') || true
		if [[ -z $tps ]] || grep -q 'error' "$work/pgbench.err"; then
			cat "$work/pgbench.err" >&2
			exit 1
		fi
		read -r idle1 total1 < <(cpu)
		awk -v f="$form" -v g="$g" -v c="$clients" -v t="$tps" -v i=$((idle1 - idle0)) -v n=$((total1 - total0)) \
			'BEGIN { printf "{\"form\":\"%s\",\"group\":%d,\"clients\":%d,\"accepts_per_sec\":%.0f,\"cpu_idle\":%.2f}\n", f, g, c, t * g, i / n }'
	done
done
