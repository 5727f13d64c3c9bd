#!/usr/bin/python3
"""PyTorch peer for bench/mnist_vs_pytorch.sh: the same models, data,
standardisation, global batch, SGD momentum and cosine learning rate as
`kiln-train mnist`. Prints one JSON line.

Run with /usr/bin/python3 (Debian's python3-torch). OPENBLAS_CORETYPE is set
by the caller: Debian's OpenBLAS otherwise picks generic kernels on this CPU.
"""
import argparse, gzip, json, math, os, struct, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def load(d, prefix):
    with gzip.open(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz")) as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, 1, r, c)
    with gzip.open(os.path.join(d, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        y = np.frombuffer(f.read(), dtype=np.uint8)
    x = (x.astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 5, padding=2)
        self.c2 = nn.Conv2d(32, 64, 5, padding=2)
        self.f1, self.f2 = nn.Linear(7 * 7 * 64, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def sgd_cosine(params, lr, total):
    """SGD momentum 0.9 (no dampening) and kiln's per-step cosine decay from lr
    over `total` steps (the first step at the base rate)."""
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    return opt, sched


def test_accuracy(model, xte, yte):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(xte), 1000):
            correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
    return correct / len(xte)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch_size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max_steps", type=int, default=0, help="speed only: stop after N steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu",
                    help="cpu or cuda: on cuda the whole data set sits in GPU memory and batches "
                         "are gathered there (PyTorch's fastest simple loop)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "t10k")
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    model = (MLP() if a.model == "mlp" else CNN()).to(dev)
    spe = math.ceil(len(xtr) / a.batch_size)
    opt, sched = sgd_cosine(model.parameters(), a.lr, spe * a.epochs)
    g = torch.Generator().manual_seed(a.seed)
    steps, samples, train_s = 0, 0, 0.0
    for ep in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=g).to(dev)
        t0 = time.perf_counter()
        for i in range(spe):
            idx = perm[i * a.batch_size:(i + 1) * a.batch_size]
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            steps += 1
            samples += len(idx)
            if a.max_steps and steps == 10:  # warm-up excluded from the timing
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0, samples, train_s = time.perf_counter(), 0, 0.0
            if a.max_steps and steps >= a.max_steps:
                break
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_s += time.perf_counter() - t0
        if a.max_steps and steps >= a.max_steps:
            break
    acc = None if a.max_steps else test_accuracy(model, xte, yte)
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "model": a.model,
                      "device": str(dev),
                      "threads": a.threads, "epochs": a.epochs, "steps": steps,
                      "samples_per_sec": samples / train_s, "test_accuracy": acc}))


if __name__ == "__main__":
    main()
