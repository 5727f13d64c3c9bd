#!/usr/bin/env python3
"""bench/service_latency.py - submit-to-all-replicas-running latency of kilnd
against the bare cost of spawning the same processes.

  bench/service_latency.py BUILD_DIR [RUNS]

Each run submits a CUSTOM job (master + 2 workers) whose replicas write a
nanosecond timestamp as their first act; latency = last replica's timestamp
minus the moment before the POST was sent. The baseline spawns the same three
`sh -c` processes directly (subprocess.Popen) and measures the same way.
Prints p50/p99 for both. Starts its own kilnd on a free loopback port."""
import json, os, shutil, subprocess, sys, tempfile, time, urllib.request

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 50
tmp = tempfile.mkdtemp(prefix="kiln-bench.")
data = os.path.join(tmp, "d")
os.makedirs(data)
kilnd = subprocess.Popen([os.path.join(build, "bin", "kilnd"), "--listen", "127.0.0.1:0",
                          "--data-dir", data, "--grace-period", "1", "--port-range", "42000-42999",
                          "--allow-root-replicas", "yes" if os.geteuid() == 0 else "no"],
                         stderr=open(os.path.join(tmp, "kilnd.err"), "w"))
try:
    for _ in range(200):
        if os.path.exists(os.path.join(data, "kilnd.addr")):
            break
        time.sleep(0.05)
    url = "http://" + open(os.path.join(data, "kilnd.addr")).read().strip()

    def cmd(out):
        # the replicas stay up a moment: a master that ends first stops the workers
        return "date +%s%N > " + out + ".tmp && mv " + out + ".tmp " + out + "; sleep 0.3"

    def wait_files(files, limit=30.0):
        end = time.time() + limit
        while time.time() < end:
            if all(os.path.exists(f) for f in files):
                return max(int(open(f).read()) for f in files)
            time.sleep(0.0005)
        raise RuntimeError("replicas did not start: %s" % files)

    def pct(v, p):
        v = sorted(v)
        return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]

    kl, base = [], []
    for i in range(runs):
        d = os.path.join(tmp, "r%d" % i)
        os.makedirs(d)
        # workers are RANK 1 and 2 (PyTorch convention): files w1 and w2
        files = [os.path.join(d, n) for n in ("m", "w1", "w2")]
        job = {"jobId": "bench_%d" % i, "trainingInput": {
            "scaleTier": "CUSTOM", "region": "us-central1",
            "masterType": "n1-standard-4",
            "masterConfig": {"containerCommand": ["sh", "-c", cmd(files[0])]},
            "workerType": "n1-standard-4", "workerCount": "2",
            "workerConfig": {"containerCommand": ["sh", "-c", cmd(d + "/w$RANK")]}}}
        body = json.dumps(job).encode()
        req = urllib.request.Request(url + "/v1/projects/bench/jobs", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.time_ns()
        urllib.request.urlopen(req).read()
        kl.append((wait_files(files) - t0) / 1e6)

        d2 = os.path.join(tmp, "b%d" % i)
        os.makedirs(d2)
        bfiles = [os.path.join(d2, n) for n in ("m", "w0", "w1")]
        t0 = time.time_ns()
        procs = [subprocess.Popen(["sh", "-c", cmd(f)]) for f in bfiles]
        base.append((wait_files(bfiles) - t0) / 1e6)
        for p in procs:
            p.wait()
    print("submit -> all 3 replicas running, %d runs (ms): kilnd p50 %.2f p99 %.2f | "
          "bare spawn p50 %.2f p99 %.2f" % (runs, pct(kl, 50), pct(kl, 99), pct(base, 50),
                                             pct(base, 99)))
finally:
    kilnd.terminate()
    kilnd.wait()
    if not os.environ.get("KEEP"): shutil.rmtree(tmp, ignore_errors=True)
