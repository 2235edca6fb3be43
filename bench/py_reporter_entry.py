"""The job bench/p1_reporter.py runs: a torchrun-style Python DDP program
(Gloo, one thread per rank, an MLP of 784-128-10 on a fixed random batch of
64) that reports every step with frameworm.Reporter(report_every=PACE).
Rank 0 writes its median step, wall time per step and report calls to OUT.

usage: py_reporter_entry.py STEPS PACE OUT
"""
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import frameworm


def main():
    steps, pace, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    times = []
    with frameworm.Reporter(report_every=pace) as reporter:
        start = time.perf_counter()
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            reporter.step(step, loss=loss.item(), samples=64, step_seconds=time.perf_counter() - t0,
                          total_steps=steps)
            times.append(time.perf_counter() - t0)
        wall = time.perf_counter() - start
        calls = reporter.calls
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"median_step_s": statistics.median(times[50:]), "wall_per_step_s": wall / steps,
                       "calls": calls, "steps": steps}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
