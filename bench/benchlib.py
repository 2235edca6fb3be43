"""Shared by the Python parts of bench/*.sh: the machine line, medians, a
local cluster to run jobs on, Protocol Buffers' wire encoding for raw
requests, and a process's peak RSS."""
import json
import os
import signal
import socket
import statistics
import subprocess
import time


def cpu_model():
    """The processor's model name from /proc/cpuinfo ("" if unknown)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine():
    """'N cores, <model>' for a report's Machine line."""
    return f"{os.cpu_count()} cores, {cpu_model()}"


def json_lines(path):
    """The JSON objects of a file's lines that start with '{'."""
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def median(values):
    values = list(values)
    return statistics.median(values) if values else float("nan")


def write_report(path, lines):
    """Writes a report's lines (a Markdown file) and echoes them."""
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(text, end="")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_cluster(bin_dir, state, workers=("w0", "w1"), slots=1):
    """A frameworm-coordinator and workers of `slots` slots on 127.0.0.1,
    their state and logs under `state`; returns (processes, coordinator
    address), the coordinator first. Give the processes to stop_cluster."""
    addr = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([f"{bin_dir}/frameworm-coordinator", f"--listen={addr}",
                               f"--state-dir={state}/state", "--metrics-listen=none",
                               "--dashboard-listen=none"],
                              stdout=open(f"{state}/c.log", "w"), stderr=subprocess.STDOUT)]
    time.sleep(1)
    for w in workers:
        procs.append(subprocess.Popen([f"{bin_dir}/frameworm-worker", f"--coordinator={addr}",
                                       f"--name={w}", f"--slots={slots}", f"--work-dir={state}/{w}"],
                                      stdout=open(f"{state}/{w}.log", "w"), stderr=subprocess.STDOUT))
    time.sleep(2)  # the workers register
    return procs, addr


def stop_cluster(procs):
    """SIGTERM, workers first; SIGKILL whatever is left after 20 s."""
    for p in procs[::-1]:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def varint(v):
    """Protocol Buffers' base-128 varint of a non-negative integer."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def field(number, wire, body=b""):
    """One Protocol Buffers field: its tag, then for wire type 2 the length
    and `body`, else `body` as given (a varint's bytes)."""
    tag = varint(number << 3 | wire)
    return tag + (varint(len(body)) + body if wire == 2 else body)


def hwm_kb(pid):
    """The process's peak RSS (VmHWM) in kB; 0 when not found."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    return 0
