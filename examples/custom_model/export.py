#!/usr/bin/env python3
"""Your own model on Frameworm, the Python side: define a model, export it
with TorchScript, save the data as tensors, and (after the job) load the
trained weights back.

    .venv/bin/python examples/custom_model/export.py /tmp/mine
        writes /tmp/mine/model.pt (torch.jit.script) and /tmp/mine/data.pt
        ({"x": images as uint8, "y": labels, "x_val", "y_val"}) from the
        Fashion-MNIST files of Debian's dataset-fashion-mnist
    build/bin/frameworm-train --model=/tmp/mine/model.pt --data=/tmp/mine/data.pt \
        --epochs=1 --nprocs=2 --checkpoint-dir=/tmp/mine/ck
        or, on a cluster: frameworm-cli submit examples/custom_model/job.yaml
    .venv/bin/python examples/custom_model/export.py --check /tmp/mine/ck/model.pt /tmp/mine
        the trained TorchScript model's accuracy on the validation images
    .venv/bin/python examples/custom_model/export.py --check-checkpoint CKPT /tmp/mine
        the same from a checkpoint (frameworm-cli download JOB CKPT), loaded
        into this file's model with frameworm.load_checkpoint
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


class SmallConvNet(nn.Module):
    """Takes raw uint8 images [N, 28, 28]; normalises them itself, so the
    data file stays small (bytes, not floats)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 7 * 7, 10))

    def forward(self, x):
        x = (x.float().unsqueeze(1) / 255.0 - 0.2860) / 0.3530
        return self.head(self.conv(x))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.from_numpy(np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims).copy())


def load_split(prefix):
    x = read_idx(os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz")).long()
    return x, y


def accuracy(model, out_dir):
    data = torch.load(os.path.join(out_dir, "data.pt"))
    model.eval()
    with torch.no_grad():
        pred = model(data["x_val"]).argmax(1)
    return (pred == data["y_val"]).float().mean().item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", metavar="MODEL", help="a trained TorchScript model to evaluate")
    p.add_argument("--check-checkpoint", metavar="CKPT", help="a Frameworm checkpoint to evaluate")
    p.add_argument("out_dir")
    a = p.parse_args()
    if a.check:
        print(f"validation accuracy of {a.check}: {accuracy(torch.jit.load(a.check), a.out_dir):.4f}")
        return 0
    if a.check_checkpoint:
        try:
            from frameworm import load_checkpoint  # pip install ./python
        except ImportError:  # straight from the checkout
            import importlib.util
            path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                                "frameworm", "checkpoint.py")
            spec = importlib.util.spec_from_file_location("frameworm_checkpoint", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            load_checkpoint = module.load_checkpoint
        ck = load_checkpoint(a.check_checkpoint)
        model = SmallConvNet()
        model.load_state_dict(ck["model"])
        print(f"validation accuracy at step {ck['step']}: {accuracy(model, a.out_dir):.4f}")
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(SmallConvNet()).save(os.path.join(a.out_dir, "model.pt"))
    x, y = load_split("train")
    xv, yv = load_split("t10k")
    torch.save({"x": x, "y": y, "x_val": xv, "y_val": yv}, os.path.join(a.out_dir, "data.pt"))
    print(f"wrote {a.out_dir}/model.pt and {a.out_dir}/data.pt ({len(y)} training, {len(yv)} validation images)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
