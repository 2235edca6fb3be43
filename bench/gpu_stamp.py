"""gpu_stamp.py OUT CMD...: runs CMD, writes each output line to OUT with the
time it arrived (seconds since start), echoes the non-step lines and every
50th step line; exits with CMD's status. Used by bench/gpu.sh."""
import subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
n = 0
with open(out, "w") as f:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in iter(p.stdout.readline, b""):
        t = time.perf_counter() - t0
        line = raw.decode("utf-8", "replace")
        f.write("%.6f\t%s" % (t, line))
        if "step_seconds" not in line or n % 50 == 0:
            sys.stdout.write(line)
            sys.stdout.flush()
        if "step_seconds" in line:
            n += 1
    rc = p.wait()
print("exit %d after %.1f s, %d step lines" % (rc, time.perf_counter() - t0, n))
sys.exit(rc)
