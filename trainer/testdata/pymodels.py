#!/usr/bin/env python3
"""Python side of frameworm-train's TorchScript tests (script_model_test).

  pymodels.py export DIR KIND       DIR/model.pt (torch.jit.script) and DIR/data.pt
  pymodels.py reference DIR KIND --world N [training flags]
                                    trains the same eager model in PyTorch
                                    (DDP over gloo for N > 1, torch's own
                                    DistributedSampler, optimizers, schedulers
                                    and clip_grad_norm_) and prints one JSON
                                    line per step from rank 0: {"step", "loss", "lr"}
  pymodels.py evaluate MODEL DATA KIND
                                    loads a trained model with torch.jit.load and
                                    prints {"val_loss": ...} on the validation
                                    split frameworm-train holds out
  pymodels.py from_checkpoint CKPT DATA KIND
                                    the same for a frameworm checkpoint file read
                                    by the Python client's load_checkpoint into
                                    the eager model ({"val_loss", "step"}), or
                                    {"error": ...} when it refuses the file

KIND: classify (cross-entropy, 3 classes), regress (MSE), unused (a branch
that never gets a gradient), two_inputs (forward(x, mask)).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VAL_FRACTION = 0.1  # frameworm-train's default --val-fraction


class Classify(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.drop(torch.tanh(self.fc1(x))))


class Regress(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x).squeeze(1)


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 1)
        self.spare = nn.Linear(8, 1)  # never called

    def forward(self, x):
        return self.used(x).squeeze(1)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x, mask):
        return (self.fc(x * mask)).squeeze(1)


MODELS = {"classify": Classify, "regress": Regress, "unused": Unused, "two_inputs": TwoInputs}
LOSSES = {"classify": F.cross_entropy, "regress": F.mse_loss, "unused": F.mse_loss,
          "two_inputs": F.mse_loss}


def make_data(kind, n=640):
    g = torch.Generator().manual_seed(7)
    if kind == "classify":
        x = torch.randn(n, 12, generator=g)
        w = torch.randn(12, 3, generator=g)
        return {"x": x, "y": (x @ w).argmax(1)}
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, generator=g)
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    if kind == "two_inputs":
        mask = (torch.rand(n, 8, generator=g) > 0.2).float()
        return {"x": x, "mask": mask, "y": (x * mask) @ w}
    return {"x": x, "y": y}


def export(d, kind):
    torch.manual_seed(3)
    os.makedirs(d, exist_ok=True)
    torch.jit.script(MODELS[kind]()).save(os.path.join(d, "model.pt"))
    torch.save(make_data(kind), os.path.join(d, "data.pt"))


def split(data):
    n = data["y"].shape[0]
    nv = int(round(VAL_FRACTION * n))
    return ({k: v[: n - nv] for k, v in data.items()}, {k: v[n - nv:] for k, v in data.items()})


def run_model(m, batch, kind):
    if kind == "two_inputs":
        return m(batch["x"], batch["mask"])
    return m(batch["x"])


def reference_rank(rank, a):
    if a.world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(a.port)
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(a.seed)
    model = MODELS[a.kind]()
    model.load_state_dict(torch.jit.load(os.path.join(a.dir, "model.pt")).state_dict())
    if a.world > 1:
        model = nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=a.kind == "unused")
    train, _ = split(torch.load(os.path.join(a.dir, "data.pt")))
    n = train["y"].shape[0]
    sampler = torch.utils.data.DistributedSampler(
        range(n), num_replicas=a.world, rank=rank, shuffle=True, seed=a.seed)
    params = list(model.parameters())
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    per_epoch = math.ceil(sampler.num_samples / a.batch_size)
    total = min(a.max_steps, a.epochs * per_epoch) if a.max_steps else a.epochs * per_epoch
    if a.lr_schedule == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=a.lr_step_size, gamma=a.lr_gamma)
    elif a.lr_schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total, eta_min=a.min_lr)
    else:
        sched = None
    step = 0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        idx = list(sampler)
        for b in range(0, len(idx), a.batch_size):
            if a.max_steps and step >= a.max_steps:
                return
            rows = torch.tensor(idx[b:b + a.batch_size])
            batch = {k: v.index_select(0, rows) for k, v in train.items()}
            lr = opt.param_groups[0]["lr"]
            opt.zero_grad()
            loss = LOSSES[a.kind](run_model(model, batch, a.kind), batch["y"])
            loss.backward()
            if a.clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, a.clip_grad_norm)
            opt.step()
            if sched is not None:
                sched.step()
            step += 1
            if rank == 0:
                print(json.dumps({"step": step, "loss": loss.item(), "lr": lr}), flush=True)
    if a.world > 1:
        dist.destroy_process_group()


def reference(a):
    if a.world == 1:
        reference_rank(0, a)
    else:
        torch.multiprocessing.spawn(reference_rank, args=(a,), nprocs=a.world)


def evaluate(model_path, data_path, kind):
    m = torch.jit.load(model_path)
    m.eval()
    _, val = split(torch.load(data_path))
    with torch.no_grad():
        loss = LOSSES[kind](run_model(m, val, kind), val["y"]).item()
    print(json.dumps({"val_loss": loss}))


def from_checkpoint(ckpt, data_path, kind):
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "frameworm_checkpoint", os.path.join(here, "..", "..", "python", "frameworm", "checkpoint.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        ck = module.load_checkpoint(ckpt)
    except module.CheckpointError as e:
        print(json.dumps({"error": str(e)}))
        return
    m = MODELS[kind]()
    m.load_state_dict(ck["model"])
    m.eval()
    _, val = split(torch.load(data_path))
    with torch.no_grad():
        loss = LOSSES[kind](run_model(m, val, kind), val["y"]).item()
    print(json.dumps({"val_loss": loss, "step": ck["step"]}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["export", "reference", "evaluate", "from_checkpoint"])
    p.add_argument("args", nargs="+")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip-grad-norm", type=float, default=0.0)
    p.add_argument("--lr-schedule", default="constant")
    p.add_argument("--lr-step-size", type=int, default=0)
    p.add_argument("--lr-gamma", type=float, default=0.1)
    p.add_argument("--min-lr", type=float, default=0.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.command == "export":
        export(a.args[0], a.args[1])
    elif a.command == "reference":
        a.dir, a.kind = a.args[0], a.args[1]
        reference(a)
    elif a.command == "evaluate":
        evaluate(*a.args)
    else:
        from_checkpoint(*a.args)


if __name__ == "__main__":
    sys.exit(main())
