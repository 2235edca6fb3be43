"""The coordinator's peak memory under a flood of large requests, with its
gRPC memory quota (--rpc-memory-quota, 256 MiB by default) and without
(--rpc-memory-quota=0), in one run: each time a fresh frameworm-coordinator
on loopback gets CALLS concurrent SubmitJob requests of MIB MiB (the
coordinator refuses every one of them, as specs are at most 64 KiB), all
on one connection (one client's flood) or each on a connection of its own
(many clients'); printed: the answers and the coordinator's peak RSS
(VmHWM), and the ratio of the two peaks.

usage: .venv/bin/python bench/rpc_flood.py BIN_DIR [CALLS [MIB [one|each]]]
"""
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no line per GOAWAY
import grpc  # noqa: E402

from benchlib import field, hwm_kb  # noqa: E402


def flood(bin_dir, quota_flag, calls, request, each):
    """(answers, peak RSS in MB) of one coordinator under the flood."""
    with tempfile.TemporaryDirectory() as state:
        coord = subprocess.Popen([os.path.join(bin_dir, "frameworm-coordinator"),
                                  "--listen=127.0.0.1:0", f"--state-dir={state}",
                                  "--metrics-listen=none", "--dashboard-listen=none", quota_flag],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = coord.stdout.readline()  # "frameworm-coordinator listening on HOST:PORT"
            if "listening on" not in line:
                sys.exit(f"the coordinator did not start: {line!r}")
            target = line.split()[-1]
            answers = collections.Counter()
            lock = threading.Lock()
            options = [("grpc.max_send_message_length", 64 << 20),
                       ("grpc.use_local_subchannel_pool", 1)]  # a connection per channel
            shared = None if each else grpc.insecure_channel(target, options=options)

            def call():
                ch = shared or grpc.insecure_channel(target, options=options)
                try:
                    ch.unary_unary("/frameworm.v1.JobService/SubmitJob")(request, timeout=120)
                    got = "OK"
                except grpc.RpcError as e:
                    got = e.code().name
                finally:
                    if ch is not shared:
                        ch.close()
                with lock:
                    answers[got] += 1

            threads = [threading.Thread(target=call) for _ in range(calls)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if shared is not None:
                shared.close()
            return dict(answers), hwm_kb(coord.pid) / 1024
        finally:
            coord.kill()
            coord.wait()


def main():
    bin_dir = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    each = (sys.argv[4] if len(sys.argv) > 4 else "each") == "each"
    body = b"name: x\n#" + b"a" * (mib * (1 << 20) - 64) + b"\n"
    request = field(2, 2, body)  # SubmitJobRequest.spec_yaml
    peaks = {}
    for name, flag in (("quota 256 MiB", "--rpc-memory-quota=268435456"),
                       ("no quota", "--rpc-memory-quota=0")):
        answers, peaks[name] = flood(bin_dir, flag, calls, request, each)
        print(f"{name}: {calls} calls of {mib} MiB on {'a connection each' if each else 'one connection'}: "
              f"{answers}; "
              f"coordinator peak RSS {peaks[name]:.0f} MB", flush=True)
    print(f"peak with the quota / without: {peaks['quota 256 MiB'] / peaks['no quota']:.2f}")


if __name__ == "__main__":
    main()
