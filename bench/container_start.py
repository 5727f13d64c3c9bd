#!/usr/bin/env python3
"""bench/container_start.py BUILD_DIR [ROUNDS] - the start overhead of a
container replica under kilnd, against `podman run` of the same image by hand.

  kiln: POST a one-replica job whose master is the image (containerCommand
        `sh -c 'echo started; sleep 2'`), then poll the job's log (GET
        jobs/J:logs) every 5 ms until the program's "started" line is there.
        Time = POST sent -> the line seen. (Not the RUNNING state: for a
        container kilnd sets it when `podman run` starts, before the program
        inside runs, so it would flatter kiln.)
  peer: `podman --runtime runc run --rm --init --network host --ulimit ...
        IMAGE sh -c 'echo started; sleep 2'` with the flags kilnd uses on
        these machines. Time = podman started -> "started" read on its stdout.

Rounds alternate kiln and peer (the machines are noisy); it prints both p50s
and the ratio kiln/peer (1.0 = no overhead over podman itself). The image is a
directory of busybox (busybox-static) imported with `podman import`: nothing
is pulled. Needs root (kilnd runs replicas as root with
--allow-root-replicas yes) and podman.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

IMAGE = "localhost/kiln-bench-start:1"
PROG = ["sh", "-c", "echo started; sleep 2"]
RUN_ARGS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "--network", "host"]


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def make_image(tmp):
    root = os.path.join(tmp, "img")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "tmp"))
    bb = shutil.which("busybox")
    if not bb:
        sys.exit("container_start: busybox is not installed (apt-get install busybox-static)")
    shutil.copy(bb, os.path.join(root, "bin", "busybox"))
    for a in ("sh", "echo", "sleep", "true"):
        os.symlink("busybox", os.path.join(root, "bin", a))
    tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["podman", "import", "-q", "-", IMAGE], stdin=tar.stdout, check=True,
                   capture_output=True)
    tar.wait()


def api(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def kiln_round(base, i):
    job = {"jobId": f"start_{i}", "trainingInput": {
        "scaleTier": "BASIC", "region": "us-central1",
        "masterConfig": {"imageUri": IMAGE, "containerCommand": PROG}}}
    t0 = time.perf_counter()
    api(f"{base}/v1/projects/bench/jobs", "POST", job)
    while True:
        logs = api(f"{base}/v1/projects/bench/jobs/start_{i}:logs")
        if any(e.get("message") == "started" for e in logs.get("entries", [])):
            dt = time.perf_counter() - t0
            break
        st = logs.get("jobState")
        if st in ("FAILED", "CANCELLED", "SUCCEEDED"):
            sys.exit(f"container_start: job start_{i} ended {st} before its program printed")
        if time.perf_counter() - t0 > 60:
            sys.exit(f"container_start: job start_{i} printed nothing in 60 s")
        time.sleep(0.005)
    api(f"{base}/v1/projects/bench/jobs/start_{i}:cancel", "POST", {})
    return dt


def peer_round(i):
    t0 = time.perf_counter()
    p = subprocess.Popen(["podman", "--runtime", "runc", "run", "--rm", "--init",
                          "--name", f"kiln-bench-peer-{i}", *RUN_ARGS, IMAGE, *PROG],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    dt = time.perf_counter() - t0
    if line.strip() != "started":
        sys.exit(f"container_start: podman run printed {line!r}")
    p.kill()
    p.wait()
    subprocess.run(["podman", "rm", "-f", f"kiln-bench-peer-{i}"], capture_output=True)
    return dt


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    if os.geteuid() != 0:
        sys.exit("container_start: run as root (kilnd's replicas run as root here)")
    tmp = tempfile.mkdtemp(prefix="kiln-bench-start.")
    kilnd = None
    try:
        make_image(tmp)
        data = os.path.join(tmp, "d")
        kilnd = subprocess.Popen([os.path.join(build, "bin", "kilnd"), "--listen", "127.0.0.1:0",
                                  "--data-dir", data, "--allow-root-replicas", "yes",
                                  "--grace-period", "1"],
                                 stderr=open(os.path.join(tmp, "kilnd.err"), "w"))
        addr = os.path.join(data, "kilnd.addr")
        for _ in range(200):
            if os.path.exists(addr) and os.path.getsize(addr):
                break
            time.sleep(0.05)
        base = "http://" + open(addr).read().strip()
        # one of each first, untimed: image layers and caches warm for both
        kiln_round(base, 0)
        peer_round(0)
        kiln, peer = [], []
        for i in range(1, rounds + 1):
            kiln.append(kiln_round(base, i))
            peer.append(peer_round(i))
        k50, p50 = statistics.median(kiln), statistics.median(peer)
        cpu = "?"
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        print(f"container start, {rounds} alternating rounds, {os.cpu_count()} cores, {cpu}")
        print(f"  kiln  submit -> first line  p50 {k50 * 1000:7.1f} ms  "
              f"(min {min(kiln) * 1000:.1f}, max {max(kiln) * 1000:.1f})")
        print(f"  podman run -> first line    p50 {p50 * 1000:7.1f} ms  "
              f"(min {min(peer) * 1000:.1f}, max {max(peer) * 1000:.1f})")
        print(f"  ratio kiln/podman: {k50 / p50:.2f}")
    finally:
        if kilnd:
            kilnd.terminate()
            kilnd.wait()
        # replicas outlive kilnd by design: their programs end by themselves
        # (sleep 2) or were cancelled; remove what is left of this run's
        time.sleep(3)
        left = subprocess.run(["podman", "ps", "-aq", "--filter", "name=kiln-bench"],
                              capture_output=True, text=True).stdout.split()
        if left:
            subprocess.run(["podman", "rm", "-f", *left], capture_output=True)
        subprocess.run(["podman", "rmi", "-f", IMAGE], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
