#!/usr/bin/env python3
"""Python DDP peer for Frameworm's benchmarks (run under torchrun).

Trains the same models as frameworm-train (same layer order, so the same
initial weights for a seed), on the same Fashion-MNIST data with the same
normalisation and torch's own DistributedSampler (which frameworm's sampler
reproduces), and prints one JSON line per step on rank 0:
  {"step": n, "loss": .., "step_seconds": ..}
then {"event": "done", ...} like frameworm-train.

--frameworm-syncs makes a step wait on the device where frameworm-train's
does: loss and accuracy read back (.item()) after backward, then the
optimizer step; --ddp wraps the model in DistributedDataParallel even at
world size 1 (--backend gloo|nccl), for DDP's overhead at one rank.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    xt = torch.from_numpy(x.copy()).to(torch.float32).div_(255.0)
    xt = xt.sub_(0.2860).div_(0.3530).unsqueeze(1)
    return xt, torch.from_numpy(y.astype(np.int64))


def make_model(name):
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--device", default="cpu", help="cpu | cuda (one process)")
    p.add_argument("--backend", default="gloo", help="process group backend: gloo | nccl")
    p.add_argument("--ddp", action="store_true", help="DDP even at world size 1")
    p.add_argument("--frameworm-syncs", action="store_true",
                   help="read loss and accuracy back before the optimizer step, as frameworm-train does")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    ddp = world > 1 or a.ddp
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if a.device == "cuda":
        torch.cuda.set_device(local_rank)
    if ddp:
        dist.init_process_group(a.backend)
    x, y = load(a.data_dir, "train")
    torch.manual_seed(a.seed)
    model = make_model(a.model)
    dev = torch.device("cuda", local_rank) if a.device == "cuda" else torch.device("cpu")
    model = model.to(dev)
    if ddp:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if a.device == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    sampler = torch.utils.data.DistributedSampler(
        range(len(y)), num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    step, epoch = 0, 0
    loss_fn = nn.CrossEntropyLoss()
    while step < a.max_steps:
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        for b in range(0, len(idx) - a.batch_size + 1, a.batch_size):
            if step >= a.max_steps:
                break
            bi = idx[b:b + a.batch_size]
            xb, yb = x.index_select(0, bi), y.index_select(0, bi)
            t0 = time.perf_counter()
            xb, yb = xb.to(dev), yb.to(dev)
            opt.zero_grad()
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            if a.frameworm_syncs:
                lv = loss.item()
                (out.argmax(1) == yb).sum().item()
                opt.step()
            else:
                opt.step()
                lv = loss.item()  # waits for the device
            dt = time.perf_counter() - t0
            step += 1
            if rank == 0:
                print(json.dumps({"step": step, "loss": lv, "step_seconds": dt}), flush=True)
        epoch += 1
    if rank == 0:
        print(json.dumps({"event": "done", "steps": step, "world_size": world}), flush=True)
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
