"""Reads Frameworm checkpoint files (ckpt-<step>.pt, ckpt-best.pt) in Python.

    import frameworm
    ck = frameworm.load_checkpoint("ckpt-400.pt")
    model.load_state_dict(ck["model"])      # the same names as model.state_dict()
    ck["step"], ck["epoch"]

A checkpoint file is a 24-byte header {b"FWCKPT01", payload length (uint64
LE), CRC-32 of the payload (uint32 LE), 0 (uint32)} and a LibTorch archive
(the format torch.jit.save writes); the archive holds model/param/<name>,
model/buffer/<name>, the optimizer's state and state/<field> values. Needs
torch (imported on first use, so the client itself does not).
"""
import io
import os
import stat
import struct
import zlib

MAGIC = b"FWCKPT01"
HEADER = struct.Struct("<8sQII")


class CheckpointError(ValueError):
    """The file is not a complete, intact Frameworm checkpoint."""


def read_payload(path):
    """The archive bytes of `path`, after checking magic, length and CRC. The
    header is read first: a file whose size disagrees with it is refused
    without reading on, and a device or pipe (/dev/zero) is not read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path}: not a regular file")
        head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            raise CheckpointError(f"{path}: {len(head)} bytes, shorter than the 24-byte header")
        magic, length, crc, _ = HEADER.unpack(head)
        if magic != MAGIC:
            raise CheckpointError(f"{path}: not a Frameworm checkpoint (magic {magic!r})")
        have = st.st_size - HEADER.size
        if have == length:
            payload = f.read(length + 1)  # one byte more: did the file change size?
            have = len(payload)
    if have != length:
        raise CheckpointError(
            f"{path}: truncated or padded: the header says {length} payload bytes, "
            f"the file has {have}")
    if zlib.crc32(payload) != crc:
        raise CheckpointError(f"{path}: the payload's CRC-32 does not match the header")
    return payload


def load_checkpoint(path, map_location="cpu"):
    """{"model": state_dict, "step": int, "epoch": int, "batch_in_epoch": int,
    "world_size": int} of the checkpoint at `path`."""
    import torch

    archive = torch.jit.load(io.BytesIO(read_payload(path)), map_location=map_location)
    entries = dict(archive.state_dict())
    entries.update(dict(archive.named_buffers()))
    model = {}
    out = {"model": model}
    for key, value in entries.items():
        for prefix in ("model/param/", "model/buffer/"):
            if key.startswith(prefix):
                model[key[len(prefix):]] = value
        if key.startswith("state/") and key != "state/rng" and value.numel() == 1:
            field = key[len("state/"):]
            out[field] = value.item() if value.is_floating_point() else int(value.item())
    if not model:
        raise CheckpointError(f"{path}: no model parameters in the archive")
    return out
