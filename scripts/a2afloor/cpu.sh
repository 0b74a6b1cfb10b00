#!/usr/bin/env bash
# cpu.sh CHANNELS URL PID [bench a2a flags]: loads the server at URL (process PID) with
# `CHANNELS bench a2a --target URL --warmup 0 ...` and prints the CPU time per request of the
# server (from /proc/PID/stat) and of the load generator (from its rusage), beside req/s.
set -euo pipefail
bin=$1 url=$2 pid=$3
shift 3
# A server started as `cmd > file &` may run under a shell of its own: measure its one child.
case $(cat "/proc/$pid/comm") in
sh | bash | dash) pid=$(pgrep -P "$pid") ;;
esac
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before=$(cpu)
TIMEFORMAT='generator-cpu %U %S'
out=$({ time "$bin" bench a2a --target "$url" --warmup 0 "$@"; } 2>&1)
after=$(cpu)
requests=$(grep -o '"requests":[0-9]*' <<<"$out" | head -1 | cut -d: -f2)
rps=$(grep -o '"req_per_sec":[0-9.]*' <<<"$out" | head -1 | cut -d: -f2)
gen=$(awk '/generator-cpu/ {print $2 + $3}' <<<"$out")
awk -v b="$before" -v a="$after" -v t="$ticks" -v n="$requests" -v g="$gen" -v r="$rps" 'BEGIN {
	printf "req/s %s  requests %d  server %.3f ms/request  generator %.3f ms/request\n", r, n, (a - b) / t * 1000 / n, g * 1000 / n }'
