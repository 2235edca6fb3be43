"""A torchrun-style program (Python DDP over Gloo, reading MASTER_ADDR,
RANK, ...) that reports its steps to its Frameworm job with
frameworm.Reporter; the diagnosis e2e stops one rank of it.

usage: torchrun_reporting.py STEPS
"""
import sys
import time

import torch
import torch.distributed as dist

import frameworm


def main():
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with frameworm.Reporter() as reporter:
        assert reporter.enabled, "FRAMEWORM_COORDINATOR and FRAMEWORM_JOB_ID are set in a job"
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            x = torch.randn(32, 64)
            y = torch.randint(0, 10, (32,))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)  # a step of ~25 ms, like a small real model's
            d = reporter.step(step, loss=loss.item(), samples=32,
                              step_seconds=time.perf_counter() - t0, total_steps=steps)
            # Rank 0's answer decides, so every rank acts after the same step.
            flags = torch.tensor([int(d.checkpoint), int(d.stop), d.checkpoint_at_step])
            dist.broadcast(flags, src=0)
            if flags[0]:
                print(f"checkpoint asked for step {int(flags[2])} taken after step {step}",
                      flush=True)
            if flags[1]:
                break
    print(f"done at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
