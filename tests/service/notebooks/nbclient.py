#!/usr/bin/env python3
"""tests/service/notebooks/nbclient.py - drives a notebook instance through
kilnd's proxy with Jupyter's own protocols (REST and WebSocket).

  nbclient.py BASE TOKEN run CODE       -> prints the cell's stdout
  nbclient.py BASE TOKEN terminal TEXT  -> prints what the terminal echoed
  nbclient.py BASE TOKEN put PATH TEXT / get PATH
  nbclient.py BASE TOKEN ws-status      -> the HTTP status of a refused upgrade
  nbclient.py BASE TOKEN ws-hold N URL  -> GET URL's status while N WebSockets are open

BASE is http://HOST:PORT/notebooks/P/NAME/; TOKEN "" sends no credentials.
Exit 1 with the reason on stderr when a step fails."""
import json
import sys
import time
import urllib.error
import urllib.request
import uuid

import websocket


def hdrs(token):
    return {"Authorization": "Bearer " + token} if token else {}


def rest(base, token, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs(token))
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def ws_url(base, path):
    return base.replace("http://", "ws://").replace("https://", "wss://") + path


def run(base, token, code):
    k = rest(base, token, "POST", "api/kernels", {"name": "python3"})
    ws = websocket.create_connection(ws_url(base, "api/kernels/%s/channels" % k["id"]),
                                     header=[f"{a}: {b}" for a, b in hdrs(token).items()],
                                     timeout=60)
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "kiln", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
    out, deadline = [], time.time() + 60
    while time.time() < deadline:
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        t = m["msg_type"]
        if t == "stream":
            out.append(m["content"]["text"])
        elif t == "error":
            sys.exit("cell failed: %s" % m["content"]["evalue"])
        elif t == "status" and m["content"]["execution_state"] == "idle":
            break
    ws.close()
    rest(base, token, "DELETE", "api/kernels/" + k["id"])
    sys.stdout.write("".join(out))


def terminal(base, token, text):
    t = rest(base, token, "POST", "api/terminals")
    ws = websocket.create_connection(ws_url(base, "terminals/websocket/" + t["name"]),
                                     header=[f"{a}: {b}" for a, b in hdrs(token).items()],
                                     timeout=30)
    ws.send(json.dumps(["stdin", "echo %s-$((6*7))\r" % text]))
    seen, deadline = "", time.time() + 30
    while time.time() < deadline and ("%s-42" % text) not in seen:
        m = json.loads(ws.recv())
        if m[0] == "stdout":
            seen += m[1]
    ws.close()
    rest(base, token, "DELETE", "api/terminals/" + t["name"])
    print("%s-42" % text if ("%s-42" % text) in seen else "no echo: " + seen[-200:])


def main():
    base, token, verb = sys.argv[1], sys.argv[2], sys.argv[3]
    if verb == "run":
        run(base, token, sys.argv[4])
    elif verb == "terminal":
        terminal(base, token, sys.argv[4])
    elif verb == "put":
        rest(base, token, "PUT", "api/contents/" + sys.argv[4],
             {"type": "file", "format": "text", "content": sys.argv[5]})
    elif verb == "get":
        print(rest(base, token, "GET", "api/contents/" + sys.argv[4])["content"])
    elif verb == "ws-hold":  # ws-hold N API_URL: N WebSockets open, then GET API_URL
        socks = [websocket.create_connection(ws_url(base, "api/events/subscribe"),
                                             header=[f"{a}: {b}" for a, b in hdrs(token).items()],
                                             timeout=10) for _ in range(int(sys.argv[4]))]
        req = urllib.request.Request(sys.argv[5], headers=hdrs(token))
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                print(r.status)
        except urllib.error.HTTPError as e:
            print(e.code)
        for w in socks:
            w.close()
    elif verb == "ws-status":
        try:
            ws = websocket.create_connection(ws_url(base, "api/events/subscribe"),
                                             header=[f"{a}: {b}" for a, b in hdrs(token).items()],
                                             timeout=10)
            ws.close()
            print(101)
        except websocket.WebSocketBadStatusException as e:
            print(e.status_code)
    else:
        sys.exit("unknown verb " + verb)


if __name__ == "__main__":
    try:
        main()
    except urllib.error.HTTPError as e:
        sys.exit("HTTP %d: %s" % (e.code, e.read()[:300]))
