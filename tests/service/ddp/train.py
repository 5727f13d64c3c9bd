# An unmodified PyTorch DDP program (the Kubeflow PyTorchJob convention):
# init_process_group reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from
# the environment kilnd sets. It trains a few steps and checks that every
# replica ends with the same weights (gradients were all-reduced).
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(100 + rank)  # each replica its own data
for step in range(5):
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
w = model.module.weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
print("rank %d of %d in sync: %s" % (rank, world, all(torch.equal(ws[0], t) for t in ws)))
dist.destroy_process_group()
