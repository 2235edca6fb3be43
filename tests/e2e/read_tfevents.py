"""Prints the scalars of a TensorBoard log directory as JSON, read with the
tensorboard package's own event reader: {"tag": [[step, value], ...]}.

usage: read_tfevents.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    acc.Reload()
    out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
