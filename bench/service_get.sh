#!/bin/bash
# bench/service_get.sh - GET job throughput of kilnd under wrk, against nginx
# serving the same JSON from a file (the target: kilnd >= half of nginx).
#
#   bench/service_get.sh BUILD_DIR [SECONDS] [CONNECTIONS] [ROUNDS]
#
# ROUNDS (default 3) alternate kilnd and nginx; the ratio is best against best.
# Both listen on 127.0.0.1 and share this machine's cores with wrk; nginx
# runs with worker_processes auto, kilnd with its default thread pool.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
SECS=${2:-10}
CONNS=${3:-32}
ROUNDS=${4:-3}
T=$(mktemp -d /tmp/kiln-bench-get.XXXXXX)
KPID=""
NPID=""
cleanup() {
    [ -n "$KPID" ] && kill "$KPID" 2>/dev/null && wait "$KPID" 2>/dev/null
    [ -n "$NPID" ] && kill "$NPID" 2>/dev/null && wait "$NPID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

root_ok=no
[ "$(id -u)" = 0 ] && root_ok=yes
"$BUILD/bin/kilnd" --listen 127.0.0.1:0 --data-dir "$T/d" --allow-root-replicas "$root_ok" 2>"$T/kilnd.err" &
KPID=$!
for _ in $(seq 1 100); do [ -s "$T/d/kilnd.addr" ] && break; sleep 0.05; done
URL=http://$(cat "$T/d/kilnd.addr")
curl -sf -X POST -H 'Content-Type: application/json' "$URL/v1/projects/bench/jobs" \
    -d '{"jobId":"get_1","labels":{"team":"bench"},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-8","workerType":"n1-standard-8","workerCount":"4","parameterServerType":"n1-standard-4","parameterServerCount":"2","masterConfig":{"containerCommand":["sh","-c","exit 0"]}}}' >/dev/null
for _ in $(seq 1 100); do
    curl -s "$URL/v1/projects/bench/jobs/get_1" | grep -q '"SUCCEEDED"' && break
    sleep 0.05
done
mkdir -p "$T/www/v1/projects/bench/jobs" "$T/nginx"
curl -s "$URL/v1/projects/bench/jobs/get_1" >"$T/www/v1/projects/bench/jobs/get_1"
BYTES=$(wc -c <"$T/www/v1/projects/bench/jobs/get_1")
cat >"$T/nginx/nginx.conf" <<NGX
worker_processes auto;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $T/nginx; proxy_temp_path $T/nginx; fastcgi_temp_path $T/nginx;
    uwsgi_temp_path $T/nginx; scgi_temp_path $T/nginx;
    server {
        listen 127.0.0.1:0;
        root $T/www;
        default_type application/json;
    }
}
NGX
# nginx cannot listen on port 0: take a free port from the kernel first
NPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed -i "s/listen 127.0.0.1:0;/listen 127.0.0.1:$NPORT;/" "$T/nginx/nginx.conf"
nginx -p "$T/nginx" -c "$T/nginx/nginx.conf" -g 'daemon off;' 2>>"$T/nginx/error.log" &
NPID=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$NPORT/v1/projects/bench/jobs/get_1" >/dev/null && break; sleep 0.05; done

rate() { wrk -t2 -c"$CONNS" -d"${SECS}s" "$1" | awk '/Requests\/sec/ {print $2}'; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
# alternate the two servers each round (load on the shared cores drifts), best of each
KB=0
NB=0
for r in $(seq 1 "$ROUNDS"); do
    K=$(rate "$URL/v1/projects/bench/jobs/get_1")
    N=$(rate "http://127.0.0.1:$NPORT/v1/projects/bench/jobs/get_1")
    echo "  round $r: kilnd $K req/s, nginx $N req/s"
    KB=$(max "$KB" "$K")
    NB=$(max "$NB" "$N")
done
echo "GET job ($BYTES bytes), wrk -t2 -c$CONNS -d${SECS}s, best of $ROUNDS alternating rounds: kilnd $KB req/s, nginx (static file) $NB req/s, ratio $(python3 -c "print('%.2f' % ($KB / $NB))")"
