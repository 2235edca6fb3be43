"""Drives a real cluster through the frameworm Python package as a user
would from a notebook; prints one JSON object with what it saw (the C++
test in cluster_test.cc checks it).

usage: python_client_check.py COORDINATOR TLS_DIR
"""
import json
import os
import sys
import tempfile
import time

import frameworm


def main():
    coordinator, tls_dir = sys.argv[1], sys.argv[2]
    out = {}
    with frameworm.Client(coordinator, tls_dir=tls_dir) as c:
        job = c.submit({
            "name": "from-python",
            "nodes": 2,
            "backend": "gloo",
            "train": {"model": "mlp", "dataset": "fashion-mnist", "max_steps": 30,
                      "batch_size": 32},
            "checkpoint": {"every_n_steps": 10},
        })
        out["job"] = job
        updates = []
        final = c.watch(job, on_update=lambda s: updates.append(s.get("state")), timeout=180)
        out["state"] = final["state"]
        out["updates"] = len(updates)
        rows = c.metrics(job)
        out["steps"] = [r["step"] for r in rows]
        out["loss_first"], out["loss_last"] = rows[0]["loss"], rows[-1]["loss"]
        out["ranks"] = sorted({r["ranks"] for r in rows})
        out["times_ordered"] = all(0 < a["unix_ms"] <= b["unix_ms"] for a, b in zip(rows, rows[1:]))
        evs = c.events(job)
        out["events"] = [e["kind"] for e in evs]
        # 64-bit fields are ints (JSON would make them strings): the last
        # event's seq resumes the listing, and a status's numbers compare.
        out["events_after_last"] = len(c.events(job, after_seq=evs[-1]["seq"]))
        out["int64_as_int"] = all(isinstance(v, int) for v in (
            evs[-1]["seq"], evs[-1]["unix_ms"], final["generation"], c.status(job)["step"]))
        out["listed"] = job in [j["job_id"] for j in c.jobs()]
        # The newest checkpoint's weights, fetched and read as a state dict.
        with tempfile.TemporaryDirectory() as d:
            path = c.download_checkpoint(job, os.path.join(d, "ck.pt"))
            ck = frameworm.load_checkpoint(path)
            out["checkpoint_step"] = ck["step"]
            out["checkpoint_tensors"] = sorted(ck["model"])
            try:
                c.download_checkpoint(job, os.path.join(d, "none.pt"), step=7)
                out["missing_step"] = "downloaded"
            except frameworm.FramewormError as e:
                out["missing_step"] = f"{e.code}: {e.message}"
            out["left_in_dir"] = sorted(os.listdir(d))
        try:
            c.submit({"name": "bad", "nodez": 2})
            out["bad_spec"] = "accepted"
        except frameworm.FramewormError as e:
            out["bad_spec"] = f"{e.code}: {e.message}"
        try:
            c.cancel(job)
            out["cancel_ended"] = "accepted"
        except frameworm.FramewormError as e:
            out["cancel_ended"] = e.code
    try:
        frameworm.Client("192.0.2.1:7070")
        out["plaintext_remote"] = "allowed"
    except frameworm.FramewormError as e:
        out["plaintext_remote"] = e.code
    # An address whose port is out of range fails at once, naming it.
    try:
        frameworm.Client("127.0.0.1:99999")
        out["bad_port"] = "allowed"
    except frameworm.FramewormError as e:
        out["bad_port"] = f"{e.code}: {e.message}"
    # A watch whose coordinator stays away (nothing listens on port 1)
    # reconnects for reconnect_for seconds, then raises UNAVAILABLE.
    with frameworm.Client("127.0.0.1:1") as gone:
        start = time.monotonic()
        try:
            gone.watch("job-000099", reconnect_for=2)
            out["watch_gone"] = "returned"
        except frameworm.FramewormError as e:
            out["watch_gone"] = e.code
        out["watch_gone_after_s"] = round(time.monotonic() - start, 1)
    # A Reporter whose coordinator does not answer (nothing listens on port
    # 1): after 2 s of failed report calls it dials a new channel, at most
    # one per 2 s, and the training loop is never held up.
    away = frameworm.Reporter(environ={"FRAMEWORM_COORDINATOR": "127.0.0.1:1",
                                       "FRAMEWORM_JOB_ID": "job-000099"},
                              ping_every=0, timeout=1.0)
    start, step, slowest = time.monotonic(), 0, 0.0
    while away.redials == 0 and time.monotonic() - start < 6:
        step += 1
        t = time.monotonic()
        away.step(step)
        slowest = max(slowest, time.monotonic() - t)
        time.sleep(0.02)
    out["away_redial_after_s"] = round(time.monotonic() - start, 1)
    time.sleep(0.5)
    out["away_redials"] = away.redials
    out["away_requeued"] = away.requeued > 0  # its reports wait to be sent again
    out["away_step_fast"] = slowest < 0.1
    away.close(flush=0.5)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
