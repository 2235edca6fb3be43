#!/usr/bin/env bash
# P3: rendezvous of N = 64, 256, 1024 simulated ranks through a real
# frameworm-coordinator, against PyTorch's TCPStore rendezvous at the same N.
# Writes bench/results/p3_rendezvous.md (medians over P3_RUNS runs).
#
# Needs: ${FRAMEWORM_BUILD_DIR:-build}/bin/{frameworm-coordinator,
# p3_rendezvous_bench} and .venv/bin/python with torch.
#
# The TCPStore client does a reverse DNS lookup of its socket address on
# every connect (c10d socket.cpp, for a log line). Where the resolver is
# unreachable or drops concurrent queries, each lost query costs a 5 s
# resolver timeout, which would swamp the figures. When run as root with
# unshare(1) available, the peer therefore runs in a private mount namespace
# whose nsswitch.conf says "hosts: files" (nothing else changes); one extra
# run at N=64 with the system resolver shows the effect (P3_SYSTEM_DNS=0
# skips it).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P3_RUNS:-5}"
SIZES="${P3_SIZES:-64 256 1024}"
OUT="$ROOT/bench/results/p3_rendezvous.md"
need "$BIN/frameworm-coordinator" "$BIN/p3_rendezvous_bench" "$PY"

peer_mode="system resolver"
run_peer() {  # N -> one JSON line on stdout
  if [[ "$peer_mode" == "hosts: files" ]]; then
    timeout 600 unshare -m --propagation private bash -c \
      'mount --bind "$0" /etc/nsswitch.conf && exec "$1" "$2" "$3"' \
      "$TMP/nsswitch.conf" "$PY" "$ROOT/bench/p3_tcpstore_peer.py" "$1" \
      2>>"$TMP/peer.stderr"
  else
    timeout 600 "$PY" "$ROOT/bench/p3_tcpstore_peer.py" "$1" 2>>"$TMP/peer.stderr"
  fi
}
printf 'hosts: files\n' > "$TMP/nsswitch.conf"
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null &&
   unshare -m --propagation private bash -c \
     'mount --bind "$0" /etc/nsswitch.conf' "$TMP/nsswitch.conf" 2>/dev/null; then
  peer_mode="hosts: files"
fi

for n in $SIZES; do
  for run in $(seq 1 "$RUNS"); do
    echo "P3 N=$n run $run/$RUNS" >&2
    timeout 300 "$BIN/p3_rendezvous_bench" --ranks="$n" >> "$TMP/frameworm.jsonl"
    run_peer "$n" >> "$TMP/tcpstore.jsonl"
  done
done
if [[ "${P3_SYSTEM_DNS:-1}" == 1 && "$peer_mode" == "hosts: files" ]]; then
  echo "P3 TCPStore N=64 with the system resolver" >&2
  timeout 600 "$PY" "$ROOT/bench/p3_tcpstore_peer.py" 64 \
    2>>"$TMP/peer.stderr" > "$TMP/tcpstore_dns.jsonl" || true
fi

"$PY" - "$TMP" "$OUT" "$RUNS" "$peer_mode" <<'PY'
import json, os, statistics, subprocess, sys
tmp, out, runs, peer_mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def load(name):
    p = os.path.join(tmp, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
fw, ts, dns = load("frameworm.jsonl"), load("tcpstore.jsonl"), load("tcpstore_dns.jsonl")
med = lambda rows, n, k: statistics.median(r[k] for r in rows if r["ranks"] == n)
ms = lambda x: f"{x * 1000:.1f}"
from benchlib import cpu_model; cpu = cpu_model()
sizes = sorted({r["ranks"] for r in fw})
L = ["# P3: rendezvous of N ranks — Frameworm coordinator vs PyTorch TCPStore", "",
     "Command: `FRAMEWORM_BUILD_DIR=<build> bench/p3_rendezvous.sh` "
     f"({runs} runs per N; every figure is the median over the runs, in ms)",
     f"Machine: {os.cpu_count()} cores ({cpu}), shared with other jobs (noisy); "
     "client and server on the same cores, 127.0.0.1 only.", "",
     "Frameworm: a real `frameworm-coordinator` process (fresh `--state-dir`), N "
     "simulated workers with 1 slot each over real gRPC (RegisterWorker, then a "
     "Session stream each on the callback client API, heartbeat first so it "
     "attaches, heartbeats every 0.5 s), then SubmitJob with nodes min=max=N, "
     "nproc_per_node=1. *rendezvous* = SubmitJob sent -> the last of the N "
     "workers has its StartTask; every run checks that the ranks are exactly "
     "0..N-1 (one per worker), WORLD_SIZE=N, the env agrees, and "
     "MASTER_ADDR/MASTER_PORT and the generation are the same for all. "
     "*register+attach* = all RegisterWorker calls -> ListWorkers shows all N alive.", "",
     "TCPStore (torch " + subprocess.run([sys.executable, "-c", "import torch;print(torch.__version__)"],
                                          capture_output=True, text=True).stdout.strip() +
     "): a master `TCPStore` (started before timing, like the coordinator), N rank "
     "clients (threads in 2 processes); each rank connects, `add`s the arrival "
     "counter, the last arrival sets a barrier key, every rank `wait`s on it — "
     "what static env:// rendezvous does to bootstrap. *barrier* = add+wait with "
     "connections open (counterpart of Frameworm's rendezvous); "
     "*connect+barrier* also includes each rank's connect (counterpart of "
     "Frameworm's register+attach+rendezvous). Name service for the peer: "
     f"`{peer_mode}` (see the note below).", "",
     "| N | Frameworm rendezvous | TCPStore barrier | ratio (TCPStore / Frameworm) | "
     "Frameworm register+attach | Frameworm register+attach+rendezvous | "
     "TCPStore connect+barrier | ratio | 1024 in < 500 ms? |",
     "|---|---|---|---|---|---|---|---|---|"]
for n in sizes:
    fr, ra = med(fw, n, "rendezvous_s"), med(fw, n, "register_attach_s")
    full = statistics.median(r["rendezvous_s"] + r["register_attach_s"]
                             for r in fw if r["ranks"] == n)
    tb = med(ts, n, "barrier_s") if any(r["ranks"] == n for r in ts) else float("nan")
    tf = med(ts, n, "connect_barrier_s") if any(r["ranks"] == n for r in ts) else float("nan")
    target = ("yes" if fr < 0.5 else "NO") if n == 1024 else ""
    L.append(f"| {n} | {ms(fr)} | {ms(tb)} | {tb / fr:.2f}x | {ms(ra)} | {ms(full)} | "
             f"{ms(tf)} | {tf / full:.2f}x | {target} |")
L += ["", "Frameworm details (medians, ms): SubmitJob RPC returns / first StartTask "
      "arrives / coordinator CPU over the whole run (s):", ""]
for n in sizes:
    L.append(f"- N={n}: submit RPC {ms(med(fw, n, 'submit_rpc_s'))}, first StartTask "
             f"{ms(med(fw, n, 'first_start_s'))}, RegisterWorker calls alone "
             f"{ms(med(fw, n, 'register_rpc_s'))}, coordinator CPU "
             f"{med(fw, n, 'coordinator_cpu_s'):.2f} s")
L += ["", "Raw runs: every JSON line the two benchmarks printed is below.", "",
      "```"] + [json.dumps(r) for r in fw + ts + dns] + ["```", ""]
L += ["## Note: TCPStore and the name service", "",
      "Every TCPStore client connect does a reverse DNS lookup of its socket "
      "address (c10d `socket.cpp`, to format a log line; it logs \"The hostname "
      "of the client socket cannot be retrieved. err=-3\" when that fails). On "
      "this sandbox, whose resolver drops concurrent queries, each lost query costs "
      "a 5 s resolver timeout: with the system resolver, connect+barrier took "
      "about 10 s at N=64, 30 s at N=256 and 110 s at N=1024 when first measured. "
      "That is the environment, not TCPStore, so the table uses `hosts: files` "
      "(a private mount namespace; nothing else differs)."]
if dns:
    d = dns[0]
    L.append(f"This run, N=64 with the system resolver: connect+barrier "
             f"{ms(d['connect_barrier_s'])} ms (barrier alone {ms(d['barrier_s'])} ms).")
L += ["", "## Reading", "",
      "Frameworm's rendezvous is one SubmitJob that assigns every rank and "
      "pushes N StartTask messages down already-open Session streams; the "
      "coordinator never waits for the ranks. TCPStore's barrier needs N add "
      "round trips plus N waits on one store thread. Note what is compared: "
      "Frameworm's rendezvous replaces torchrun's agent-level rendezvous; the "
      "trainers it starts still bootstrap their c10d process group from "
      "MASTER_ADDR/MASTER_PORT (a TCPStore) as usual.", "",
      "Where Frameworm's time goes at N=1024 (from the details above): all of "
      "the work happens inside the SubmitJob handler. "
      "`Coordinator::StartGenerationLocked` builds N TaskSpecs with their env "
      "maps, writes N assignment rows in one SQLite transaction, and queues N "
      "StartTask commands. Then `Flush()` pokes N session reactors, which "
      "start their writes right away. So the first StartTask arrives while "
      "SubmitJob is still running, and the call returns about when the last "
      "one does, all on gRPC's two callback threads. Nothing here needs a fix "
      "for the target (roughly 10x under 500 ms). One point still stands: "
      "that SQLite transaction runs on a callback thread under the core "
      "mutex, which P4 shows to be the general weak spot.", "",
      "Registration is slower than a TCPStore connect at small N. It is more "
      "work: an HTTP/2 connection per channel, a RegisterWorker RPC, a "
      "Session stream opened and attached, and the bench polling ListWorkers "
      "every 5 ms until all N are alive.", ""]
open(out, "w").write("\n".join(L))
print(open(out).read())
PY
