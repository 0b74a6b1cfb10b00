#!/usr/bin/env bash
# scripts/test.sh — the one test command, for people and for CI (.ci/run).
#
# Starts a throwaway PostgreSQL cluster (installing PostgreSQL first when it is missing and we are
# root on Debian), exports TEST_DATABASE_URL, then runs gofmt, go vet, staticcheck, go test, and
# go test -race on the concurrent packages. The cluster and its directory are removed on exit, also
# on failure.
#
# Environment:
#   TEST_DATABASE_URL  if already set, use that database and start no cluster
#   STATICCHECK=0      skip staticcheck (it needs the module proxy the first time)
#   FUZZTIME           how long each fuzz target runs (default 15s; 0 skips fuzzing)
#   TEST_SOAK          how long the chaos soak's load runs (default 20s; empty skips it; see
#                      docs/architecture.md, "The chaos soak")
#   PG_BIN             directory holding initdb and pg_ctl (default: newest /usr/lib/postgresql/*/bin)
set -euo pipefail

# Packages with concurrency: they run under the race detector (and only there, so nothing runs
# twice). Extend this list when a package grows goroutines.
RACE_PKGS=(
	./taskplane/...
	./delivery/...
	./sources/...
	./operator/...
	./push/...
	./cmd/channels/...
	./interop/...
	./internal/...
	./checkpoint/...
)
STATICCHECK_VERSION=v0.8.2
DB_NAME=channels_test

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

started=$SECONDS
section() { printf '\n==> %s  (+%ds)\n' "$*" "$((SECONDS - started))"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------
find_pg_bin() {
	if [[ -n "${PG_BIN:-}" ]]; then
		[[ -x "$PG_BIN/initdb" && -x "$PG_BIN/pg_ctl" && -x "$PG_BIN/psql" ]] && return 0
		die "PG_BIN=$PG_BIN holds no initdb, pg_ctl and psql"
	fi
	# The newest major that has a server: postgresql-client-NN alone puts psql, but no initdb,
	# in /usr/lib/postgresql/NN/bin.
	local d
	while IFS= read -r d; do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/psql" ]]; then
			PG_BIN=$d
			return 0
		fi
	done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV)
	if command -v pg_config >/dev/null && [[ -x "$(pg_config --bindir)/initdb" ]]; then
		PG_BIN=$(pg_config --bindir)
		return 0
	fi
	return 1
}

section "tools"
command -v go >/dev/null || die "go is not on PATH; install Go 1.26 (https://go.dev/dl/)"
packages=()
if [[ -z "${TEST_DATABASE_URL:-}" ]] && ! find_pg_bin; then
	packages+=(postgresql)
fi
# The race detector needs cgo, hence a C compiler; the module proxy needs CA certificates.
command -v gcc >/dev/null || packages+=(gcc libc6-dev)
[[ -e /etc/ssl/certs/ca-certificates.crt ]] || packages+=(ca-certificates)
# Optional: without them the tests that need them skip (the JS interop test fails under CI=true).
# node and npm run the @a2a-js/sdk interop test (interop/js; npm ci there when node_modules is absent).
optional=()
command -v node >/dev/null && command -v npm >/dev/null || optional+=(nodejs npm)
# chromium loads the /admin dashboard headless (cmd/channels TestDashboardRendersInChromium).
command -v chromium >/dev/null || optional+=(chromium)
# sqlite3, the shell an operator may point at a live database (taskplane/store/sqlite
# TestAcknowledgedUpdateSurvivesARefusedOpenAndAnOperatorsSQLiteShell).
command -v sqlite3 >/dev/null || optional+=(sqlite3)
can_install=false
[[ $EUID -eq 0 ]] && command -v apt-get >/dev/null && can_install=true
if ((${#packages[@]} > 0)) && ! $can_install; then
	die "missing ${packages[*]}; install them (or run as root on Debian to let this script do it)"
fi
if ((${#optional[@]} > 0)); then
	if $can_install; then
		packages+=("${optional[@]}")
	elif [[ "${CI:-}" == true ]]; then
		# Under CI the tests that need them fail rather than skip: say so now, not after the suite.
		die "missing ${optional[*]} (CI=true: the tests that need them fail without them); install them (or run as root on Debian to let this script do it)"
	else
		echo "note: ${optional[*]} missing; the tests that need them are skipped (run as root on Debian to install them)"
	fi
fi
if ((${#packages[@]} > 0)); then
	echo "installing ${packages[*]}"
	# A fresh machine's apt-daily/unattended-upgrades often holds apt's locks for minutes: install
	# waits for the dpkg lock (DPkg::Lock::Timeout); update does not honour that for its lists
	# lock, hence the retries.
	for try in 1 2 3 4 5 6 7 8 9 10; do
		apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null && break
		((try < 10)) || die "apt-get update failed 10 times"
		echo "apt-get update failed (try $try of 10; another apt may hold its lock); again in 30s" >&2
		sleep 30
	done
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-upgrade --no-install-recommends "${packages[@]}" </dev/null
	if [[ -z "${TEST_DATABASE_URL:-}" ]]; then
		find_pg_bin || die "postgresql installed but initdb/pg_ctl not found under /usr/lib/postgresql/*/bin"
	fi
fi
go version

# ---------------------------------------------------------------------------------------------
# PostgreSQL: a throwaway cluster on a free loopback port, its socket in its own directory
# ---------------------------------------------------------------------------------------------
PGTMP=
log=
cleanup() {
	local rc=$?
	[[ -z "$log" ]] || rm -f "$log"
	if [[ -n "$PGTMP" ]]; then
		if [[ -f "$PGTMP/data/postmaster.pid" ]]; then
			as_pg "$PG_BIN/pg_ctl" -D "$PGTMP/data" -m immediate -w stop >/dev/null 2>&1 || true
		fi
		rm -rf "$PGTMP"
	fi
	exit "$rc"
}
trap cleanup EXIT

# Long steps run as background jobs in their own process group (set -m) that the script waits
# for: bash runs no trap until a foreground command ends, so a TERM or INT during a 10-minute
# go test would wait for it (and a supervisor's SIGKILL after its grace period would leave the
# cluster running). A signal interrupts the wait at once; the trap ends the step's whole group
# (go and the test binaries it started), then the EXIT trap stops the cluster.
set -m
step=
run() {
	local rc=0
	"$@" </dev/null &
	step=$!
	wait "$step" || rc=$?
	step=
	return "$rc"
}
on_signal() {
	trap '' INT TERM
	if [[ -n "$step" ]]; then
		kill -TERM -- "-$step" 2>/dev/null || true
		wait "$step" 2>/dev/null || true
	fi
	exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# as_pg runs a command as the cluster's owner: initdb refuses root, so root uses "postgres".
as_pg() {
	if [[ $EUID -eq 0 ]]; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# port_in_use reports whether something accepts connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if [[ -z "${TEST_DATABASE_URL:-}" ]]; then
	section "postgres: start a throwaway cluster ($PG_BIN)"
	if [[ $EUID -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "no postgres user to own the cluster (initdb refuses root)"
	fi
	# Under /tmp, not $TMPDIR: the postgres user must reach it, and the socket path must be short.
	PGTMP=$(mktemp -d /tmp/channels-pg.XXXXXX)
	[[ $EUID -eq 0 ]] && chown postgres:postgres "$PGTMP"
	as_pg "$PG_BIN/initdb" -D "$PGTMP/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C \
		>"$PGTMP/initdb.log" 2>&1 || { cat "$PGTMP/initdb.log" >&2; die "initdb failed"; }
	port=
	for _ in 1 2 3 4 5; do
		candidate=$((20000 + RANDOM % 40000))
		port_in_use "$candidate" && continue
		# fsync=on: the store's durability is part of what the tests and benchmarks measure.
		if as_pg "$PG_BIN/pg_ctl" -D "$PGTMP/data" -l "$PGTMP/server.log" -w -t 30 start \
			-o "-c listen_addresses=127.0.0.1 -p $candidate -k $PGTMP -c fsync=on -c max_connections=200" \
			>/dev/null; then
			port=$candidate
			break
		fi
	done
	[[ -n "$port" ]] || { cat "$PGTMP/server.log" >&2 || true; die "postgres did not start"; }
	"$PG_BIN/psql" -q -X -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
		-c "CREATE DATABASE $DB_NAME" </dev/null
	export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/$DB_NAME?sslmode=disable"
	echo "TEST_DATABASE_URL=$TEST_DATABASE_URL"
else
	section "postgres: using the TEST_DATABASE_URL from the environment"
fi

# ---------------------------------------------------------------------------------------------
# Go checks
# ---------------------------------------------------------------------------------------------
section "gofmt -l"
unformatted=$(gofmt -l .)
if [[ -n "$unformatted" ]]; then
	printf '%s\n' "$unformatted"
	die "the files above need gofmt"
fi

section "go vet ./..."
run go vet ./...
section "channels matrix --check";  run go run ./cmd/channels matrix --check # docs/a2a-source-conformance.md is current

if [[ "${STATICCHECK:-1}" != 0 ]]; then
	section "staticcheck ($STATICCHECK_VERSION)"
	run go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...
fi

# Not "mapfile < <(go list …)": a process substitution's exit status is lost, and a failing
# go list would silently leave packages untested.
race_list=$(go list "${RACE_PKGS[@]}")
all_list=$(go list ./...)
mapfile -t race_pkgs <<<"$race_list"
[[ -n "$race_list" ]] || die "go list ${RACE_PKGS[*]} named no packages"
other_list=$(grep -vxF -f <(printf '%s\n' "${race_pkgs[@]}") <<<"$all_list" || true)
other_pkgs=()
[[ -z "$other_list" ]] || mapfile -t other_pkgs <<<"$other_list"

# Each package's tests may run past go test's default 10 minutes on a slow machine: the kill -9
# test alone allows itself 6 per store when a round yields few events. CI gives 90.
section "go test (${#other_pkgs[@]} packages)"
if ((${#other_pkgs[@]} > 0)); then
	run go test -timeout 30m "${other_pkgs[@]}"
fi

section "go test -race ${RACE_PKGS[*]} (${#race_pkgs[@]} packages; chaos soak ${TEST_SOAK-20s})"
TEST_SOAK="${TEST_SOAK-20s}" run go test -race -timeout 30m "${race_pkgs[@]}"

# Bounded fuzzing of request decoding on each binding, and of the canonical form a request's
# data is deduplicated by (FUZZTIME per target; 0 skips). A failing input is written under the
# package's testdata/fuzz/ and named in the output.
if [[ "${FUZZTIME:-15s}" != 0 ]]; then
	for target in FuzzRESTDecode:./taskplane/a2ahttp/ FuzzJSONRPCDecode:./taskplane/a2ajsonrpc/ FuzzCanonicalData:./taskplane/; do
		section "fuzz ${target%%:*} (${FUZZTIME:-15s})"
		log=$(mktemp)
		if ! go test -run='^$' -fuzz="^${target%%:*}\$" -fuzztime="${FUZZTIME:-15s}" "${target#*:}" 2>&1 | tee "$log"; then
			# Go's fuzz coordinator can miss its own deadline on a loaded machine and fail with
			# "context deadline exceeded" without any failing input: run it once more. A real
			# finding names its input ("Failing input written to") and fails at once.
			if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
				echo "fuzz coordinator timed out with no failing input; running ${target%%:*} again"
				go test -run='^$' -fuzz="^${target%%:*}\$" -fuzztime="${FUZZTIME:-15s}" "${target#*:}"
			else
				rm -f "$log"
				exit 1
			fi
		fi
		rm -f "$log"
	done
fi

section "ok"
