#!/bin/bash
# tests/service/it_notebooks_browser.sh - a notebook instance in a real
# headless browser (Debian's chromium + chromedriver, python3-selenium): the
# dashboard lists it with its GPUs, its link opens JupyterLab through kilnd's
# proxy with the sign-in cookie, a cell runs over the kernel's WebSocket from
# the page, and without the cookie the page gets 401
# (tests/service/notebooks/browser_e2e.py; docs/notebooks.md).
# Screenshots: BUILD/notebook-screenshots/.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need chromium selenium jupyterlab
NBPY=${KILN_NOTEBOOK_PYTHON:-${KILN_NOTEBOOK_VENV:-$HOME/.cache/kiln/notebook-venv}/bin/python}

cat >"$T/nodes.json" <<'JSON'
{"nodes": [{"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_T4", "count": 2}]}]}
JSON
printf 'browser-test-token-p1-0001 p1 editor\n' >"$T/tokens"
chmod 600 "$T/tokens"
start_kilnd "$T/d" --node-config "$T/nodes.json" --tokens "$T/tokens" --notebook-python "$NBPY"
TOKEN=browser-test-token-p1-0001

api POST "/v1/projects/p1/locations/us-west1-b/instances?instanceId=nb1" \
    '{"machineType": "n1-standard-8", "acceleratorConfig": {"type": "NVIDIA_TESLA_T4", "coreCount": "2"}, "vmImage": {"project": "deeplearning-platform-release", "imageFamily": "common-cpu"}}'
check_eq "create nb1" "$STATUS" 200
s=""
for _ in $(seq 1 120); do
    api GET /v1/projects/p1/locations/us-west1-b/instances/nb1
    s=$(printf '%s' "$BODY" | jget state)
    [ "$s" = ACTIVE ] && break
    sleep 0.5
done
check_eq "nb1 ACTIVE" "$s" ACTIVE

mkdir -p "$BUILD/notebook-screenshots"
check "JupyterLab in chromium through kilnd" timeout 280 /usr/bin/python3 \
    "$(dirname "$0")/notebooks/browser_e2e.py" "$URL" "$TOKEN" "$BUILD/notebook-screenshots"
finish
