#!/bin/bash
# tests/service/it_dashboard.sh - the web dashboard in a real headless browser
# (Debian's chromium + chromedriver, driven by Debian's python3-selenium)
# against a real kilnd with a tokens file, two nodes of simulated GPUs and
# kiln-train: a wrong token gets no data; a submitted job appears and is
# followed to SUCCEEDED with its logs and its chart's data; the nodes page shows
# which job holds which GPU; the queue; a running job cancelled from its page;
# the job list and the queue with 1,000 jobs load in under a second.
# Screenshots of every page: BUILD/dashboard-screenshots/ (kept as CI artifacts).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need chromium selenium
if [ ! -x "$BUILD/bin/kiln-train" ]; then
    fail "$BUILD/bin/kiln-train is not built"
    finish
fi

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON
printf 'dashboard-test-token-0001 * editor\n' >"$T/tokens"
chmod 600 "$T/tokens"
start_kilnd "$T/d" --node-config "$T/nodes.json" --tokens "$T/tokens" \
    --kiln-train "$BUILD/bin/kiln-train"
TOKEN=dashboard-test-token-0001

# the static files: served without a token, with a strict CSP
curl -s -m 10 -D "$T/h" -o "$T/index.html" "$URL/"
check "GET / is the dashboard" grep -q '<title>kiln</title>' "$T/index.html"
check "CSP: self only" grep -qi "^content-security-policy: default-src 'self'" "$T/h"
check_eq "GET /ui/app.js" "$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "$URL/ui/app.js")" \
    "200 text/javascript; charset=utf-8"
check_eq "no such file" "$(curl -s --path-as-is -o /dev/null -w '%{http_code}' "$URL/ui/../kilnd.db")" 404
check_eq "API without a token" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/projects/p1/jobs")" 401

# and one without a tokens file (loopback only): the page needs no sign-in
URL_TOKENS=$URL
start_kilnd "$T/open" --port-range 32900-32999 # runs no job
URL_OPEN=$URL
URL=$URL_TOKENS
SHOTS=$BUILD/dashboard-screenshots
rm -rf "$SHOTS"
mkdir -p "$SHOTS"
check "dashboard in chromium" timeout 280 /usr/bin/python3 "$(dirname "$0")/dashboard_e2e.py" \
    "$URL" "$TOKEN" "$SHOTS" "$URL_OPEN"
check "screenshots kept" test -s "$SHOTS/jobs.png" -a -s "$SHOTS/job-succeeded.png" -a \
    -s "$SHOTS/nodes.png" -a -s "$SHOTS/queue.png"
finish
