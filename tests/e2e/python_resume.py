"""A torchrun-style program (Python DDP over Gloo) whose rank 0 saves a disk
checkpoint when its Frameworm job asks (reporter.save) and whose every rank
resumes from reporter.resume() when restarted. The cluster e2e damages the
coordinator's copy of a checkpoint under it: what reporter.resume() reports
then (frameworm/reporter.py) decides which checkpoint the job goes on from.

usage: python_resume.py STEPS
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
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    with frameworm.Reporter() as reporter:
        try:
            state = reporter.resume()
        except Exception as e:  # reported by resume(); the generation fails
            print(f"resume failed: {e}", flush=True)
            raise
        first = 1
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            first = state["step"] + 1
            print(f"resumed from step {state['step']}", flush=True)
        model = torch.nn.parallel.DistributedDataParallel(net)
        step = first - 1
        for step in range(first, steps + 1):
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)),
                                                     torch.randint(0, 10, (32,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)  # a step of ~25 ms, like a small real model's
            d = reporter.step(step, loss=loss.item(), samples=32,
                              step_seconds=time.perf_counter() - t0, total_steps=steps)
            # Rank 0's answer decides, so every rank acts after the same step.
            flags = torch.tensor([int(d.checkpoint), int(d.stop)])
            dist.broadcast(flags, src=0)
            if flags[0] and dist.get_rank() == 0:
                reporter.save(step, {"model": net.state_dict(), "optimizer": opt.state_dict(),
                                     "step": step})
            if flags[1]:
                break
    print(f"done at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
