#!/bin/bash
# bench/service_load.sh [BUILD_DIR] - kilnd under load on loopback: CONNS
# concurrent connections (default 200) for SECONDS (default 30) through wrk,
# mixing GET of one job (60%), list (30%) and create (10%; jobs that run
# `true`). Prints req/s, p50/p99 latency, the responses by status code (429s
# are kilnd's in-flight limits at work, not errors) and kilnd's RSS before
# and after, which must stay flat. ROUNDS=N (default 1) runs the load N times
# back to back and prints the RSS after each (a leak keeps growing, a
# plateau levels off); MIX=read drops the creates (GET 60%, list 40%), to
# tell what the jobs cost from what serving costs. KILND_WRAP runs kilnd
# under a tool (e.g. KILND_WRAP="heaptrack -o /tmp/kilnd": then the RSS is
# the tool's process's, and the heap profile is the point).
#
#   CONNS=200 SECS=30 bench/service_load.sh build
#   ROUNDS=3 SECS=10 MIX=read bench/service_load.sh build
# Not a test: keep it out of CTest. kilnd runs on a private data dir with
# its defaults (--max-inflight 512, --max-inflight-per-token 64) unless
# KILND_ARGS says otherwise.
set -eu
build=$(cd "${1:-build}" && pwd)
conns=${CONNS:-200}
secs=${SECS:-30}
rounds=${ROUNDS:-1}
list_end=9 # n % 10 in [list_end, 10): a create
[ "${MIX:-}" = read ] && list_end=10
command -v wrk >/dev/null || { echo "bench/service_load.sh needs wrk (apt-get install wrk)" >&2; exit 1; }
t=$(mktemp -d /tmp/kiln-load.XXXXXX)
kpid=
trap '[ -n "$kpid" ] && kill -TERM "$kpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
tok=load-bench-token-0123456789
printf '%s p1 editor\n' "$tok" >"$t/tokens"
chmod 600 "$t/tokens"
# as root, a kilnd without a user for p1 refuses its creates (docs/service.md):
# the bench's own trivial jobs may run as root
root_ok=
[ "$(id -u)" = 0 ] && root_ok="--allow-root-replicas yes"
# shellcheck disable=SC2086
${KILND_WRAP:-} "$build/bin/kilnd" --listen 127.0.0.1:0 --data-dir "$t/d" --tokens "$t/tokens" \
    --grace-period 1 $root_ok ${KILND_ARGS:-} 2>"$t/kilnd.err" &
kpid=$!
for _ in $(seq 1 100); do [ -s "$t/d/kilnd.addr" ] && break; sleep 0.05; done
url=http://$(cat "$t/d/kilnd.addr")
curl -sf -o /dev/null -H "Authorization: Bearer $tok" -X POST \
    --data '{"jobId":"seed","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"]}}}' \
    "$url/v1/projects/p1/jobs"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$kpid/status"; }
rss0=$(rss)
cat >"$t/mix.lua" <<LUA
local threads = {}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end
function init(args)
  codes = {}
  n = 0
  hdrs = {["Authorization"] = "Bearer $tok", ["Content-Type"] = "application/json"}
end
function request()
  n = n + 1
  local r = n % 10
  if r < 6 then
    return wrk.format("GET", "/v1/projects/p1/jobs/seed", hdrs)
  elseif r < $list_end then
    return wrk.format("GET", "/v1/projects/p1/jobs?pageSize=20", hdrs)
  end
  local body = string.format('{"jobId":"load_%s_%d_%d","trainingInput":{"scaleTier":"BASIC",' ..
    '"region":"us-central1","masterConfig":{"containerCommand":["true"]}}}', os.getenv("ROUND") or "1", tid, n)
  return wrk.format("POST", "/v1/projects/p1/jobs", hdrs, body)
end
function response(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end
function done(summary, latency, requests)
  local all = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("codes")) do all[k] = (all[k] or 0) + v end
  end
  io.write(string.format("req/s %.0f  p50 %.2f ms  p99 %.2f ms  socket errors %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout))
  for k, v in pairs(all) do io.write(string.format("  HTTP %d: %d\n", k, v)) end
end
LUA
threads=$(nproc)
[ "$threads" -gt "$conns" ] && threads=$conns
echo "kilnd RSS: ${rss0} KiB before"
for r in $(seq 1 "$rounds"); do
    ROUND=$r wrk -t "$threads" -c "$conns" -d "${secs}s" --latency -s "$t/mix.lua" "$url" | sed -n '/^req\/s/,$p'
    echo "kilnd RSS after round $r: $(rss) KiB ($(ls "/proc/$kpid/task" | wc -l) threads)"
done
# where the RSS is: the main heap, anonymous mappings (glibc's per-thread
# arenas, thread stacks), files (SQLite's -shm, libraries), the largest first
awk '/^[0-9a-f]+-[0-9a-f]+ / {name = NF >= 6 ? $6 : "[anon]"; sub(/.*\//, "", name)}
     /^Rss:/ {rss[name] += $2}
     END {for (n in rss) if (rss[n] >= 256) printf "  %6d KiB  %s\n", rss[n], n}' \
    "/proc/$kpid/smaps" | sort -rn | head -8
