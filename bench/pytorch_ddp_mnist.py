#!/usr/bin/python3
"""PyTorch DistributedDataParallel peer for bench/scaling.sh: the models,
data, standardisation, SGD momentum 0.9 and cosine learning rate of
bench/pytorch_mnist.py (and `kiln-train mnist`), trained by --world_size
processes (torch.multiprocessing, gloo backend, 127.0.0.1) with --threads
intra-op threads each. --batch_size is the GLOBAL batch, as in kiln-train:
every epoch has one seeded global order, and rank r takes its slice of each
global batch, like kiln's sharding. DDP averages the gradients (bucketed
all-reduce overlapped with backward, its default 25 MB buckets).

Prints one JSON line from rank 0: samples_per_sec counts the examples of all
replicas (global batches per second x batch), over the steps after the first
10 (warm-up), like kiln-train --max_steps.

Run with /usr/bin/python3 (Debian's python3-torch); the caller sets
OPENBLAS_CORETYPE=SkylakeX (Debian's OpenBLAS otherwise picks generic kernels
on this CPU).
"""
import argparse, json, math, os, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the same models, data, optimizer, schedule and evaluation
from pytorch_mnist import CNN, MLP, load, sgd_cosine, test_accuracy  # noqa: E402


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    torch.manual_seed(a.seed)  # the same initial parameters everywhere (DDP also broadcasts)
    xtr, ytr = load(a.data_dir, "train")
    if a.train_examples:
        xtr, ytr = xtr[:a.train_examples], ytr[:a.train_examples]
    model = MLP() if a.model == "mlp" else CNN()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    B, W = a.batch_size, a.world_size
    spe = math.ceil(len(xtr) / B)
    opt, sched = sgd_cosine(ddp.parameters(), a.lr, spe * a.epochs)
    g = torch.Generator().manual_seed(a.seed)
    steps, samples, train_s = 0, 0, 0.0
    done = False
    for ep in range(a.epochs):
        ddp.train()
        perm = torch.randperm(len(xtr), generator=g)  # same order on every rank
        t0 = time.perf_counter()
        for i in range(spe):
            gidx = perm[i * B:(i + 1) * B]
            m = len(gidx)
            idx = gidx[rank * m // W:(rank + 1) * m // W]  # this replica's slice
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            # mean over the local slice; DDP averages over replicas (equal slices)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            sched.step()
            steps += 1
            samples += m
            if a.max_steps and steps == 10:  # warm-up excluded from the timing
                t0, samples, train_s = time.perf_counter(), 0, 0.0
            if a.max_steps and steps >= a.max_steps:
                done = True
                break
        train_s += time.perf_counter() - t0
        if done:
            break
    acc = None
    if not a.max_steps and rank == 0:
        acc = test_accuracy(model, *load(a.data_dir, "t10k"))
    if rank == 0:
        out.put({"framework": "pytorch-ddp", "torch": torch.__version__, "model": a.model,
                 "backend": "gloo", "world_size": W, "threads": a.threads,
                 "batch_size": B, "epochs": a.epochs, "steps": steps,
                 "samples_per_sec": samples / train_s, "test_accuracy": acc})
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch_size", type=int, default=256, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--world_size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="per process")
    ap.add_argument("--max_steps", type=int, default=0, help="speed only: stop after N steps")
    ap.add_argument("--train_examples", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0, help="0: pick from the pid")
    a = ap.parse_args()
    if a.batch_size % a.world_size:
        sys.exit(f"--batch_size={a.batch_size} must split evenly over {a.world_size} replicas")
    port = a.port or 20000 + os.getpid() % 20000
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, port, out), nprocs=a.world_size, start_method="spawn")
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
