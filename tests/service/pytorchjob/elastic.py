# An elastic PyTorchJob program, started by torchrun: the group comes from
# torchrun's c10d rendezvous (RANK, WORLD_SIZE, MASTER_ADDR set by the agent).
# It all-reduces once per step; progress is kept in a file in the working
# directory, so a group that re-forms after a worker is lost resumes. Each
# step prints the world size it ran with.
import os
import sys
import time

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
state = os.path.join(os.environ.get("KILN_ELASTIC_STATE", "."), "elastic-step")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
step = int(open(state).read()) if os.path.exists(state) else 0
print("rank %d joined a group of %d at step %d (restart %s)"
      % (rank, world, step, os.environ.get("TORCHELASTIC_RESTART_COUNT")), flush=True)
while step < steps:
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    assert int(t.item()) == world
    step += 1
    if rank == 0:
        with open(state + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(state + ".tmp", state)
    print("step %d: all-reduced across %d" % (step, world), flush=True)
    time.sleep(0.3)
dist.barrier()
dist.destroy_process_group()
print("rank %d done in a group of %d" % (rank, world), flush=True)
