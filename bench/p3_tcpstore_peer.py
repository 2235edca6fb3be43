"""P3 peer: PyTorch's TCPStore rendezvous of N ranks on 127.0.0.1.

What torch's static (env://) rendezvous does to bootstrap, per rank: connect
a TCPStore client to the master store, store.add() a shared counter (which
gets/announces the rank's arrival), and wait until all N arrived (a barrier
key set by the last arrival, which every rank waits on).

The master store (is_master=True) is started before timing, as the
Frameworm coordinator is. Ranks are threads (the store calls release the
GIL) in a few processes. Two figures per run:
  connect_barrier_s: from start until every rank knows all arrived,
                     including each rank's TCP connect;
  barrier_s:         the same with the connections already open (add + wait
                     only), the counterpart of Frameworm's
                     SubmitJob -> all StartTask with workers registered.
Prints one JSON line per run. usage: p3_tcpstore_peer.py N [procs]
"""
import json
import multiprocessing as mp
import os
import resource
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def ranks_proc(port, n, ranks, key, go_connect, go_barrier, out_q, ready_q):
    """Runs `ranks` rank threads; reports per-phase finish times."""
    stores = [None] * len(ranks)
    conn_done = [0.0] * len(ranks)
    bar_done = [0.0] * len(ranks)
    errors = []

    connected = threading.Semaphore(0)

    def rank_thread(i):
        try:
            go_connect.wait()
            stores[i] = dist.TCPStore("127.0.0.1", port, None, False,
                                      timedelta(seconds=60),
                                      wait_for_workers=False)
            conn_done[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported to the parent
            errors.append(repr(e))
        connected.release()
        if stores[i] is None:
            return
        try:
            go_barrier.wait()
            s = stores[i]
            arrived = s.add(key + "/arrived", 1)
            if arrived == n:
                s.set(key + "/all", "1")
            s.wait([key + "/all"])
            bar_done[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    # Threads exist and wait before the start signal.
    threads = [threading.Thread(target=rank_thread, args=(i,))
               for i in range(len(ranks))]
    for t in threads:
        t.start()
    ready_q.put(1)
    for _ in threads:
        connected.acquire()
    ready_q.put(2)
    for t in threads:
        t.join()
    out_q.put({"conn": max(conn_done), "bar": max(bar_done),
               "errors": errors})


def one_run(n, procs, run_id):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * n + 256)), hard))
    master = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60),
                           wait_for_workers=False)
    port = master.port
    ctx = mp.get_context("fork")
    go_connect, go_barrier = ctx.Event(), ctx.Event()
    out_q, ready_q = ctx.Queue(), ctx.Queue()
    chunks = [list(range(n))[p::procs] for p in range(procs)]
    ps = [ctx.Process(target=ranks_proc,
                      args=(port, n, c, f"run{run_id}", go_connect, go_barrier,
                            out_q, ready_q)) for c in chunks if c]
    for p in ps:
        p.start()
    for _ in ps:
        ready_q.get(timeout=60)
    # Phase 1: connect only (timed from here for connect_barrier_s).
    t0 = time.monotonic()
    go_connect.set()
    for _ in ps:
        ready_q.get(timeout=120)  # each process finished connecting
    t1 = time.monotonic()
    go_barrier.set()
    results = [out_q.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(timeout=30)
    errors = [e for r in results for e in r["errors"]]
    if errors:
        raise SystemExit(f"tcpstore peer: {len(errors)} errors, first: {errors[0]}")
    conn_end = max(r["conn"] for r in results)
    bar_end = max(r["bar"] for r in results)
    arrived = int(master.add(f"run{run_id}/arrived", 0))
    if arrived != n:
        raise SystemExit(f"tcpstore peer: {arrived} ranks arrived, want {n}")
    # connect_barrier_s: connect phase + barrier phase, without the idle gap
    # between them (the parent's hand-off from phase 1 to phase 2).
    return {"ranks": n, "procs": len(ps),
            "connect_s": conn_end - t0,
            "barrier_s": bar_end - t1,
            "connect_barrier_s": (conn_end - t0) + (bar_end - t1)}


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: p3_tcpstore_peer.py N [procs]")
    n = int(sys.argv[1])
    procs = int(sys.argv[2]) if len(sys.argv) > 2 else min(4, os.cpu_count() or 1)
    if n < 1 or procs < 1:
        raise SystemExit("N and procs must be positive")
    print(json.dumps(one_run(n, procs, 0)), flush=True)


if __name__ == "__main__":
    main()
