# An unmodified PyTorchJob program: init_process_group("gloo") finds the group
# through the environment the training operator (here: kilnd) sets, and every
# rank all-reduces its rank + 1.
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(
    "rank %d of %d: sum %d (PET_NODE_RANK=%s PET_NNODES=%s PYTHONUNBUFFERED=%s)"
    % (rank, world, int(t.item()), os.environ.get("PET_NODE_RANK"),
       os.environ.get("PET_NNODES"), os.environ.get("PYTHONUNBUFFERED"))
)
dist.destroy_process_group()
assert t.item() == world * (world + 1) / 2
