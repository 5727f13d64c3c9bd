#!/usr/bin/python3
"""bench/pytorch_resnet50.py - the PyTorch peer for kiln's ResNet-50 benchmark
(issue 6): synthetic-data training throughput in images/sec, the way
tf_cnn_benchmarks reports it, in fp32 or mixed precision (AMP).

ResNet-50 v1.5 is defined here in plain torch (torchvision is not installed
on the Debian machines): stride 2 in the 3x3 conv of each bottleneck, not in
the 1x1 (that is what makes it v1.5), batch norm after every conv, zero-init
of nothing (the speed does not depend on it). The parameter count is checked
against the published 25,557,032 for 1000 classes.

  GPU: /usr/bin/python3 bench/pytorch_resnet50.py --device cuda --batch_size 256 \
           --precision fp32|bf16|fp16 [--channels_last]
  CPU smoke check (seconds): OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 \
           bench/pytorch_resnet50.py --device cpu --batch_size 2 --image_size 64 \
           --steps 2 --warmup 1 --rounds 1

Prints one JSON object: images_per_sec (best of --rounds, each over --steps
steps after --warmup steps), the model's training FLOPs per image (3x the
forward multiply-adds x 2, counted from the layers), and, with --peak_tflops,
the model FLOPs utilisation (MFU).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RESNET50_PARAMS = 25557032


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + idt)


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def forward_macs(model, image_size, device):
    """Multiply-adds of one forward pass of one image (convs and the fc)."""
    macs = []

    def conv_hook(m, inp, out):
        k = m.kernel_size[0] * m.kernel_size[1] * m.in_channels // m.groups
        macs.append(out.numel() // out.shape[0] * k)

    def fc_hook(m, inp, out):
        macs.append(m.in_features * m.out_features)

    hooks = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(fc_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model.eval()
        model(torch.zeros(1, 3, image_size, image_size, device=device))
        model.train()
    for h in hooks:
        h.remove()
    return sum(macs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--image_size", type=int, default=224)
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    ap.add_argument("--channels_last", action="store_true")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for fp32 (PyTorch default: off for matmul)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: PyTorch's default)")
    ap.add_argument("--peak_tflops", type=float, default=0.0,
                    help="the device's dense peak for this precision, for MFU")
    a = ap.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("pytorch_resnet50: --device cuda but torch sees no GPU", file=sys.stderr)
            return 2
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32

    torch.manual_seed(0)
    model = ResNet50().to(dev)
    params = sum(p.numel() for p in model.parameters())
    if params != RESNET50_PARAMS:
        print(f"pytorch_resnet50: {params} parameters, want {RESNET50_PARAMS}", file=sys.stderr)
        return 1
    macs = forward_macs(model, a.image_size, dev)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.cuda.amp.GradScaler(enabled=a.precision == "fp16" and dev.type == "cuda")
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=dev).to(memory_format=mf)
    y = torch.randint(0, 1000, (a.batch_size,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        loss = step()
    sync()
    best = 0.0
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        sync()
        best = max(best, a.steps * a.batch_size / (time.perf_counter() - t0))
    if not torch.isfinite(loss).item():
        print("pytorch_resnet50: the loss is not finite", file=sys.stderr)
        return 1
    train_flops = 3 * 2 * macs  # forward + two backward GEMMs per layer
    out = {
        "peer": "pytorch", "torch": torch.__version__, "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "precision": a.precision, "channels_last": a.channels_last, "tf32": a.tf32,
        "batch_size": a.batch_size, "image_size": a.image_size, "params": params,
        "steps": a.steps, "rounds": a.rounds, "images_per_sec": round(best, 2),
        "train_gflops_per_image": round(train_flops / 1e9, 3),
        "achieved_tflops": round(best * train_flops / 1e12, 3),
        "loss": round(loss.item(), 4),
    }
    if dev.type == "cuda":
        # the allocator's peak, and the device's memory in use as kiln-train
        # reports its own (every process's: total - free)
        free, total = torch.cuda.mem_get_info(dev)
        out["peak_alloc_mib"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
        out["device_used_mib"] = round((total - free) / 2**20)
    if a.peak_tflops > 0:
        out["mfu"] = round(best * train_flops / 1e12 / a.peak_tflops, 4)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
