# A distributed start-up of the kind the frameworks do, from nothing but the
# environment the training operator sets (here: kilnd), without the
# frameworks themselves (JAX, XGBoost, Paddle are not installed here): rank 0
# listens where the kind's variables say, the others connect to it there,
# every process sends its rank + 1, and rank 0 sends back the sum.
#   JAXJob     COORDINATOR_ADDRESS, COORDINATOR_PORT, NUM_PROCESSES, PROCESS_ID
#   XGBoostJob MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (the rabit tracker's)
#   PaddleJob  PADDLE_MASTER, PADDLE_NNODES; rank 0 is the one with POD_IP_DUMMY
# Prints "KIND rank R of N: sum S cwd DIR" and fails unless S = N(N+1)/2.
import os
import socket
import sys
import time

kind = sys.argv[1]
e = os.environ
if kind == "jax":
    host, port = e["COORDINATOR_ADDRESS"], int(e["COORDINATOR_PORT"])
    world, rank = int(e["NUM_PROCESSES"]), int(e["PROCESS_ID"])
elif kind == "xgboost":
    host, port = e["MASTER_ADDR"], int(e["MASTER_PORT"])
    world, rank = int(e["WORLD_SIZE"]), int(e["RANK"])
else:
    host, port = e["PADDLE_MASTER"].rsplit(":", 1)
    port, world = int(port), int(e["PADDLE_NNODES"])
    rank = 0 if "POD_IP_DUMMY" in e else -1  # the others learn theirs from rank 0

if rank == 0:
    srv = socket.create_server(("", port), reuse_port=False)
    peers = []
    total = 1
    while len(peers) < world - 1:
        c, _ = srv.accept()
        f = c.makefile("rw")
        f.write("%d\n" % (len(peers) + 1))  # a rank for those that have none
        f.flush()
        total += int(f.readline())
        peers.append((c, f))
    for c, f in peers:
        f.write("%d\n" % total)
        f.flush()
        c.close()
    s = total
else:
    for attempt in range(300):
        try:
            c = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("cannot reach rank 0 at %s:%d" % (host, port))
    f = c.makefile("rw")
    given = int(f.readline())
    if rank < 0:
        rank = given
    f.write("%d\n" % (rank + 1))
    f.flush()
    s = int(f.readline())
print("%s rank %d of %d: sum %d cwd %s" % (kind, rank, world, s, os.getcwd()), flush=True)
sys.exit(0 if s == world * (world + 1) // 2 else 1)
