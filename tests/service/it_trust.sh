#!/bin/bash
# tests/service/it_trust.sh - issue 18 on a real kilnd: hashed tokens and a
# tokens file others can read refused; no token in any file kilnd writes;
# the audit log's exact lines; HTTPS with a certificate made here (curl and
# the kiln CLI with --ca-file, plain HTTP to the TLS port, a wrong CA);
# SIGHUP reloading the tokens and the certificate while a job runs; 429
# past the in-flight limits; 1000 connections of random bytes and broken
# TLS handshakes (kilnd keeps serving, its descriptor count comes back).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need openssl

KILNCLI=$BUILD/bin/kiln

# mkcert NAME: a self-signed certificate for 127.0.0.1 in $T/NAME.{crt,key}
mkcert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$T/$1.key" -out "$T/$1.crt" -days 2 -subj "/CN=$1" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
    chmod 600 "$T/$1.key"
}
sha() { printf '%s' "$1" | sha256sum | cut -c1-64; }

# ---- tokens at rest ----
out=$("$KILNCLI" tokens new --project p1 --role editor 2>/dev/null)
E1=$(printf '%s\n' "$out" | sed -n 's/^token: //p')
E1LINE=$(printf '%s\n' "$out" | sed -n 's/^line:  //p')
check "tokens new: a long url-safe token" test "$(printf '%s' "$E1" | grep -cE '^kiln_[A-Za-z0-9_-]{43}$')" = 1
check_eq "tokens new: the line holds the hash" "$E1LINE" "sha256:$(sha "$E1") p1 editor"
E1B=$("$KILNCLI" tokens new --project p1 --role editor 2>/dev/null | sed -n 's/^token: //p')
check "tokens new: a fresh token each time" test "$E1" != "$E1B"
V1=viewer-p1-plain-0123456789
E2=editor-p2-hashed-0123456789
{
    echo "$E1LINE"
    echo "$V1 p1 viewer"
    echo "sha256:$(sha "$E2") p2 editor"
} >"$T/tokens"
chmod 640 "$T/tokens"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/refused" --tokens "$T/tokens" 2>"$T/refused.err"
check_eq "group-readable tokens file refused" "$?" 1
check "refusal names chmod 600" grep -q "chmod 600" "$T/refused.err"
chmod 600 "$T/tokens"
printf 'sha256:ABCD p1 editor\n' >"$T/badhash"
chmod 600 "$T/badhash"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/refused" --tokens "$T/badhash" 2>>"$T/refused.err"
check_eq "a malformed sha256: line refused" "$?" 1
"$KILND" --listen 0.0.0.0:0 --data-dir "$T/refused" --tokens "$T/tokens" 2>>"$T/refused.err"
check_eq "non-loopback plain HTTP refused" "$?" 1
check "that refusal names the fix" grep -q -- "--tls-cert FILE --tls-key FILE" "$T/refused.err"

# ---- HTTPS ----
mkcert site
mkcert other
start_kilnd "$T/d" --tokens "$T/tokens" --tls-cert "$T/site.crt" --tls-key "$T/site.key" \
    --audit-log-max-bytes 4096 --audit-log-keep 2
ADDR=$(cat "$T/d/kilnd.addr")
URL=https://$ADDR
check "warned about the plain line" grep -q "1 line of .* holds a token in clear" "$T/d/kilnd.err"
check "says https" grep -q "listening on https://" "$T/d/kilnd.err"
export CURL_CA_BUNDLE=$T/site.crt # lib.sh's api() verifies against the site's certificate

TOKEN=$E1 api GET /v1/projects/p1/jobs
check_eq "hashed token over https" "$STATUS" 200
TOKEN=$V1 api GET /v1/projects/p1/jobs
check_eq "plain token still works" "$STATUS" 200
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$ADDR/healthz")
check_eq "plain HTTP to the TLS port gets no HTTP answer" "$code" 000
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --cacert "$T/other.crt" "$URL/healthz")
check_eq "curl with the wrong CA refused" "$code" 000
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --tls-max 1.1 --cacert "$T/site.crt" "$URL/healthz")
check_eq "TLS 1.1 refused" "$code" 000

# ---- the audit log: exactly these lines, in order ----
: >"$T/d/audit.log"
TOKEN=$E1 api POST /v1/projects/p1/jobs "$(job_json long_1 'sleep 120')"
check_eq "create over https" "$STATUS" 200
TOKEN=$E1 api GET /v1/projects/p1/jobs/long_1 # a read: not audited
TOKEN="" api POST /v1/projects/p1/jobs/long_1:cancel '{}'
check_eq "no token -> 401" "$STATUS" 401
TOKEN=$V1 api POST /v1/projects/p1/jobs/long_1:cancel '{}'
check_eq "viewer cancel -> 403" "$STATUS" 403
TOKEN=$E2 api GET /v1/projects/p1/jobs/long_1
check_eq "another project's job -> 404" "$STATUS" 404
TOKEN=$E2 api GET /v1/projects/p2/jobs/nope
check_eq "a missing job of one's own -> 404 (not audited)" "$STATUS" 404
TOKEN=wrong-token-0123456789 api GET /v1/projects/p1/jobs
check_eq "unknown token -> 401" "$STATUS" 401
"$PY" - "$T/d/audit.log" "$(sha "$E1" | cut -c1-12)" "$(sha "$V1" | cut -c1-12)" \
    "$(sha "$E2" | cut -c1-12)" "$(sha wrong-token-0123456789 | cut -c1-12)" <<'EOF' 2>"$T/audit.diff"
import json, re, sys
path, e1, v1, e2, wrong = sys.argv[1:]
# objectRef (Kubernetes'): the job touched; a create names the new job
job = {"resource": "jobs", "namespace": "p1", "name": "long_1"}
want = [
    ("POST", "/v1/projects/p1/jobs", e1, "p1", 200, "allow", job),
    ("POST", "/v1/projects/p1/jobs/long_1:cancel", None, None, 401, "deny", job),
    ("POST", "/v1/projects/p1/jobs/long_1:cancel", v1, "p1", 403, "deny", job),
    ("GET", "/v1/projects/p1/jobs/long_1", e2, "p2", 404, "deny", job),
    ("GET", "/v1/projects/p1/jobs", wrong, None, 401, "deny", {"namespace": "p1"}),
]
lines = open(path).read().splitlines()
ok = len(lines) == len(want)
for line, w in zip(lines, want):
    e = json.loads(line)
    keys = ["requestReceivedTimestamp", "verb", "requestURI", "tokenId", "project", "sourceIP",
            "code", "decision", "objectRef"]
    got = (e["verb"], e["requestURI"], e["tokenId"], e["project"], e["code"], e["decision"],
           e.get("objectRef"))
    if list(e) != keys or got != w or e["sourceIP"] != "127.0.0.1" or not re.fullmatch(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e["requestReceivedTimestamp"]):
        print("got ", line, "\nwant", w, file=sys.stderr)
        ok = False
if len(lines) != len(want):
    print("%d lines, want %d:\n%s" % (len(lines), len(want), "\n".join(lines)), file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
check "audit log: exact lines" test $? = 0
[ -s "$T/audit.diff" ] && cat "$T/audit.diff" >&2
check_eq "audit log is private" "$(stat -c %a "$T/d/audit.log")" 600
# rotation: 4 KiB per file, two old files kept
for i in $(seq 1 40); do TOKEN="" api POST /v1/projects/p1/jobs '{}'; done
check "rotated to audit.log.1" test -s "$T/d/audit.log.1"
check "kept two old files only" test ! -e "$T/d/audit.log.3"
check "each file under the cap" test "$(stat -c %s "$T/d/audit.log.1")" -le 4096
n=$(cat "$T/d/audit.log" "$T/d/audit.log.1" "$T/d/audit.log.2" | wc -l)
check "every line whole JSON" "$PY" -c '
import json, sys
[json.loads(l) for f in sys.argv[1:] for l in open(f)]' "$T/d/audit.log" "$T/d/audit.log.1" "$T/d/audit.log.2"
check "rotation keeps the newest lines ($n)" test "$n" -ge 20

# ---- the kiln CLI over https ----
KILN_TOKEN=$E1 KILN_ENDPOINT=$URL "$KILNCLI" jobs describe long_1 --project p1 --ca-file "$T/site.crt" >"$T/cli.out" 2>"$T/cli.err"
check_eq "kiln --ca-file over https" "$?" 0
check "kiln saw the job" grep -q long_1 "$T/cli.out"
KILN_TOKEN=$E1 KILN_ENDPOINT=$URL KILN_CA_FILE=$T/site.crt "$KILNCLI" jobs list --project p1 >/dev/null 2>&1
check_eq "kiln with KILN_CA_FILE" "$?" 0
KILN_TOKEN=$E1 KILN_ENDPOINT=$URL "$KILNCLI" jobs describe long_1 --project p1 --ca-file "$T/other.crt" >/dev/null 2>"$T/cli.err"
check_eq "kiln refuses the wrong CA" "$?" 1
check "and says why" grep -qi "certificate" "$T/cli.err"
env -u CURL_CA_BUNDLE KILN_TOKEN=$E1 KILN_ENDPOINT=$URL "$KILNCLI" jobs list --project p1 >/dev/null 2>&1
check_eq "kiln refuses a self-signed certificate without --ca-file" "$?" 1

# ---- SIGHUP: a new token and a new certificate, the job still running ----
TOKEN=$E1
check "job running before SIGHUP" wait_state long_1 RUNNING 20
E3=$("$KILNCLI" tokens new --project p1 --role viewer 2>/dev/null)
E3TOK=$(printf '%s\n' "$E3" | sed -n 's/^token: //p')
printf '%s\n' "$E3" | sed -n 's/^line:  //p' >>"$T/tokens"
mkcert site2
cp "$T/site2.crt" "$T/site.crt.new" && mv "$T/site.crt.new" "$T/site.crt"
cp "$T/site2.key" "$T/site.key.new" && mv "$T/site.key.new" "$T/site.key"
kill -HUP "$KPID"
wait_file "$T/d/kilnd.err" "SIGHUP: reloaded" 2
check "SIGHUP reloaded" grep -q "SIGHUP: reloaded" "$T/d/kilnd.err"
export CURL_CA_BUNDLE=$T/site2.crt
TOKEN=$E3TOK api GET /v1/projects/p1/jobs
check_eq "new token and new certificate after SIGHUP" "$STATUS" 200
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --cacert "$T/other.crt" "$URL/healthz")
check_eq "the old CA no longer verifies" "$code" 000
check_eq "the job kept running" "$(TOKEN=$E1 job_state long_1)" RUNNING
chmod 644 "$T/tokens"
kill -HUP "$KPID"
wait_file "$T/d/kilnd.err" "SIGHUP: reload failed" 2
check "a readable tokens file is refused on SIGHUP too" grep -q "SIGHUP: reload failed" "$T/d/kilnd.err"
TOKEN=$E1 api GET /v1/projects/p1/jobs
check_eq "the old tokens stay in use" "$STATUS" 200
chmod 600 "$T/tokens"

# ---- random bytes and broken TLS handshakes, 1000 times: kilnd keeps
#      serving and holds no more descriptors than before ----
nfds() { ls "/proc/$KPID/fd" 2>/dev/null | wc -l; }
FD0=$(nfds)
"$PY" - "${ADDR%:*}" "${ADDR#*:}" <<'EOF'
import os, random, socket, ssl, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
random.seed(18)

def client_hello():
    """A real ClientHello, as Python's TLS would send it first."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()

def reset(s):  # close with a RST, not a FIN
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()

kinds = [0] * 7
for i in range(1000):
    s = socket.create_connection((host, port), timeout=2)
    kind = i % 7
    kinds[kind] += 1
    try:
        if kind == 0:  # random bytes
            s.sendall(os.urandom(random.randint(1, 2048)))
        elif kind == 1:  # a TLS handshake record that lies about its length
            s.sendall(bytes([22, 3, 1, 0x40, 0]) + bytes([1, 0, 0x3f, 0xff]) + os.urandom(60))
        elif kind == 2:  # a hand-made ClientHello cut short
            s.sendall(bytes([22, 3, 3, 0, 200, 1, 0, 0, 196, 3, 3]) + os.urandom(20))
        elif kind == 3:  # a real ClientHello cut at a random byte
            h = client_hello()
            s.sendall(h[:random.randint(1, len(h) - 1)])
        elif kind == 4:  # a real ClientHello, part of the server's reply, then a RST
            s.sendall(client_hello())
            s.recv(random.randint(1, 200))
            reset(s)
            continue
        elif kind == 5:  # a real ClientHello, then random bytes
            s.sendall(client_hello() + os.urandom(random.randint(1, 600)))
        else:  # connect and reset at once
            reset(s)
            continue
        s.shutdown(socket.SHUT_WR)
        s.recv(100)
    except OSError:
        pass
    s.close()
print("  sent", kinds)
EOF
check_eq "1000 broken connections made (kilnd never refused one)" "$?" 0
TOKEN=$E1 api GET /v1/projects/p1/jobs/long_1
check_eq "kilnd serves https after 1000 broken connections" "$STATUS" 200
check "kilnd is alive" kill -0 "$KPID"
# the connections close on kilnd's side as the peers go: give it a moment
FD1=$(nfds)
for _ in $(seq 1 50); do
    FD1=$(nfds)
    [ "$FD1" -le $((FD0 + 2)) ] && break
    sleep 0.1
done
check "kilnd's descriptors are countable" test "$FD0" -gt 3
check "no descriptor leaked: $FD0 open before, $FD1 after" test "$FD1" -le $((FD0 + 2))
echo "  kilnd's descriptors: $FD0 before, $FD1 after"
TOKEN=$E1 api POST /v1/projects/p1/jobs/long_1:cancel '{}'
check_eq "cancel" "$STATUS" 200

# ---- the parameter servers' CURVE keys: a 0600 file per attempt, named in
#      KILN_PS_KEYS (never argv) ----
TOKEN=$E1 api POST /v1/projects/p1/jobs "$(job_json keys_1 'echo "keys=$KILN_PS_KEYS mode=$(stat -c %a "$KILN_PS_KEYS") lines=$(grep -c "^[a-z_]* [^ ]\{40\}$" "$KILN_PS_KEYS")"')"
check_eq "create keys_1" "$STATUS" 200
TOKEN=$E1 check "keys_1 done" wait_state keys_1 SUCCEEDED 20
TOKEN=$E1 api GET /v1/projects/p1/jobs/keys_1:logs
check "the replica got a private key file of four keys" grep -q "keys=$T/d/jobs/p1/keys_1/ps.keys mode=600 lines=4" <<<"$BODY"

# ---- no file under the data dir, or kilnd's log, holds a token ----
leaks=$(grep -rlF -e "$E1" -e "$V1" -e "$E2" -e "$E3TOK" "$T/d" 2>/dev/null)
check_eq "no token in any file kilnd wrote" "$leaks" ""

# ---- overload: 429 with Retry-After past the in-flight limits ----
start_kilnd "$T/o" --tokens "$T/tokens" --max-inflight 4 --max-inflight-per-token 2
OADDR=$(cat "$T/o/kilnd.addr")
unset CURL_CA_BUNDLE
# hold N requests in flight: headers sent, body not
"$PY" - "${OADDR%:*}" "${OADDR#*:}" "$E1" "$E2" "$T/o/hold" <<'EOF' &
import os, socket, sys, time
host, port, e1, e2, flag = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
socks = []
def hold(tok):
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(("POST /v1/projects/p1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" % tok).encode())
    socks.append(s)
hold(e1); hold(e1)
open(flag + "1", "w").close()
while not os.path.exists(flag + "go"):
    time.sleep(0.02)
hold(e2); hold(e2)
open(flag + "2", "w").close()
for _ in range(250):  # at most 5 s
    if os.path.exists(flag + "end"):
        break
    time.sleep(0.02)
for s in socks:
    s.close()
EOF
HPID=$!
for _ in $(seq 1 100); do [ -e "$T/o/hold1" ] && break; sleep 0.05; done
sleep 0.2
out=$(curl -s -m 5 -D "$T/o/h429" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $E1" "http://$OADDR/v1/projects/p1/jobs")
check_eq "third request of one token -> 429" "$out" 429
check "429 says Retry-After" grep -qi '^Retry-After: 1' "$T/o/h429"
out=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $E2" "http://$OADDR/v1/projects/p2/jobs")
check_eq "another token still served" "$out" 200
touch "$T/o/holdgo"
for _ in $(seq 1 100); do [ -e "$T/o/hold2" ] && break; sleep 0.05; done
sleep 0.2
out=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $V1" "http://$OADDR/v1/projects/p1/jobs")
check_eq "past the overall limit -> 429" "$out" 429
touch "$T/o/holdend"
wait "$HPID"
ok200=""
for _ in $(seq 1 40); do
    out=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $E1" "http://$OADDR/v1/projects/p1/jobs")
    [ "$out" = 200 ] && ok200=1 && break
    sleep 0.05
done
check "served again once they end" test -n "$ok200"

finish
