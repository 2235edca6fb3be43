"""Frameworm's Python client: submit a job (a YAML file or a dict), watch
it, read its metrics as rows and its events, cancel it.

    import frameworm
    c = frameworm.Client("127.0.0.1:7070")            # or $FRAMEWORM_COORDINATOR
    job = c.submit({"name": "mnist", "nodes": 2, "train": {"model": "cnn"}})
    final = c.watch(job, on_update=lambda s: print(s["state"], s.get("step")))
    rows = c.metrics(job)                              # [{"step": 1, "loss": ...}, ...]
    ck = frameworm.load_checkpoint("ckpt-400.pt")      # {"model": state_dict, "step": ...}

Inside a job, a torchrun-style entrypoint reports its steps with a Reporter
(frameworm.reporter): `r = frameworm.Reporter(); r.step(step, loss=...)`.

Off loopback the connection is mutual TLS with a certificate directory
(ca.crt, tls.crt, tls.key; `frameworm-cli admin ca issue --role user`), as
for frameworm-cli; plaintext there only with insecure=True.
"""
from frameworm.checkpoint import CheckpointError, load_checkpoint
from frameworm.client import Client, FramewormError, FINAL_STATES
from frameworm.reporter import Directive, Reporter

__all__ = ["Client", "FramewormError", "FINAL_STATES", "CheckpointError", "load_checkpoint",
           "Reporter", "Directive"]
