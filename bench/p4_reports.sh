#!/usr/bin/env bash
# P4: sustained TrainerService.ReportStep calls (and, in E and F, ReportSteps
# batches) plus WorkerService Session heartbeats against a real
# frameworm-coordinator on 127.0.0.1: reports/s, call latency p50/p99,
# heartbeats/s; then a breakdown of the
# server-side cost without gRPC (p4_core_bench). Writes
# bench/results/p4_reports.md (medians over P4_RUNS runs per configuration).
#
# Needs: ${FRAMEWORM_BUILD_DIR:-build}/bin/{frameworm-coordinator,
# p4_reports_bench,p4_core_bench}. Takes about
# P4_RUNS * 6 * (P4_DURATION_S + 4) seconds.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P4_RUNS:-3}"
DURATION="${P4_DURATION_S:-10}"
OUT="$ROOT/bench/results/p4_reports.md"
need "$BIN/frameworm-coordinator" "$BIN/p4_reports_bench" "$BIN/p4_core_bench"

# name|flags
CONFIGS=(
  "A: 8 ranks, 32 callers, heartbeats 1/s per worker|--workers=8 --callers=32 --heartbeat-interval-ms=1000"
  "B: 8 ranks, 8 callers, heartbeats 1/s per worker|--workers=8 --callers=8 --heartbeat-interval-ms=1000"
  "C: 256 ranks, 32 callers, heartbeats 20/s per worker|--workers=256 --callers=32 --heartbeat-interval-ms=50"
  "D (stress): 64 ranks, 64 callers, heartbeats back to back on 64 sessions|--workers=64 --callers=64 --heartbeat-interval-ms=0 --drain-timeout-s=5"
  "E: as B, each call a ReportSteps batch of 16 steps (as a trainer's StepReporter sends)|--workers=8 --callers=8 --heartbeat-interval-ms=1000 --batch=16"
  "F: as A, each call a ReportSteps batch of 16 steps|--workers=8 --callers=32 --heartbeat-interval-ms=1000 --batch=16"
)
for i in "${!CONFIGS[@]}"; do
  flags="${CONFIGS[$i]#*|}"
  for run in $(seq 1 "$RUNS"); do
    echo "P4 config $i run $run/$RUNS: $flags" >&2
    # shellcheck disable=SC2086
    line=$(timeout $((DURATION + 120)) "$BIN/p4_reports_bench" $flags \
      --duration-s="$DURATION" --warmup-s=1)
    echo "{\"config\":$i,${line#\{}" >> "$TMP/load.jsonl"
  done
done
for k in 8 64 256; do
  ops=20000; [[ $k -ge 256 ]] && ops=5000
  for run in $(seq 1 "$RUNS"); do
    echo "P4 core breakdown K=$k run $run/$RUNS" >&2
    timeout 300 "$BIN/p4_core_bench" --workers="$k" --ops="$ops" >> "$TMP/core.jsonl"
  done
done

printf '%s\n' "${CONFIGS[@]}" > "$TMP/configs.txt"
python3 - "$TMP" "$OUT" "$RUNS" "$DURATION" <<'PY'
import json, os, statistics, subprocess, sys
tmp, out, runs, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
load = [json.loads(l) for l in open(f"{tmp}/load.jsonl")]
core = [json.loads(l) for l in open(f"{tmp}/core.jsonl")]
configs = [l.rstrip("\n").split("|") for l in open(f"{tmp}/configs.txt")]
from benchlib import cpu_model; cpu = cpu_model()
loadavg = open("/proc/loadavg").read().split()[:3]
def med(rows, k): return statistics.median(r[k] for r in rows)
L = ["# P4: ReportStep and heartbeat load on the coordinator", "",
     "Command: `FRAMEWORM_BUILD_DIR=<build> bench/p4_reports.sh` "
     f"({runs} runs per configuration, {duration} s measured after 1 s warm-up; "
     "medians over the runs)",
     f"Machine: {os.cpu_count()} cores ({cpu}) shared by the load generator, the "
     "coordinator and other users' jobs (load average at the end: "
     f"{' '.join(loadavg)}); 127.0.0.1 only.", "",
     "Set-up per run: a real `frameworm-coordinator` process (fresh `--state-dir`), "
     "K simulated workers (1 slot each, Session streams) and a RUNNING job on them "
     "(nodes = K); the job id and generation come from the StartTask they received, "
     "and each report carries its rank's token (TaskSpec.token) from that rank's StartTask. "
     "Load: `callers` closed-loop callers, each with one `TrainerService.ReportStep` "
     "(E, F: one `ReportSteps` carrying 16 consecutive steps of one rank, as a trainer's "
     "StepReporter batches them; reports/s counts steps) in flight (gRPC callback client API, calls spread over 8 connections), "
     "caller i reporting ranks i, i+callers, ... (mod K) in turn, each with that "
     "rank's next step (2 metric values), so every rank reports. "
     "Heartbeats are Session stream messages without a reply: after the window "
     "every session writes a log chunk behind its heartbeats, and the run waits "
     "until the coordinator has written every rank's chunk (a stream is ordered, "
     "so by then it has handled every heartbeat sent); heartbeats/s = heartbeats "
     "written in the window / (window + that drain time). The coordinator reads at most 10 heartbeats "
     "per heartbeat interval per session (HeartbeatPacer): a session sending faster leaves a backlog in "
     "its stream, which configurations C and D drain slowly (D: not within 5 s, so no heartbeats/s). "
     "Latency is client-side, issue -> completion callback, per call (E, F: per batch). "
     "Every report in the window was accepted (any refusal fails the run) and the "
     "job is still RUNNING afterwards.", "",
     "Target: >= 20,000 messages/s with ReportStep p99 < 10 ms.", "",
     "| configuration | reports/s | p50 ms | p90 ms | p99 ms | max ms | heartbeats/s "
     "(drain s) | messages/s | coordinator CPU (cores) | load generator CPU (cores) | "
     "target met? |",
     "|---|---|---|---|---|---|---|---|---|---|---|"]
for i, (name, flags) in enumerate(configs):
    rows = [r for r in load if r["config"] == i]
    paced = any(r["messages_per_s"] is None for r in rows)
    msgs = None if paced else med(rows, "messages_per_s")
    p99 = med(rows, "p99_ms")
    met = "yes" if msgs is not None and msgs >= 20000 and p99 < 10 else "no"
    hb = ("paced: backlog not read within --drain-timeout-s" if paced else
          f"{med(rows, 'heartbeats_per_s'):,.0f} ({med(rows, 'heartbeat_drain_s'):.3f})")
    L.append(f"| {name} (`{flags}`) | {med(rows, 'reports_per_s'):,.0f} | "
             f"{med(rows, 'p50_ms'):.2f} | {med(rows, 'p90_ms'):.2f} | {p99:.2f} | "
             f"{med(rows, 'max_ms'):.1f} | {hb} | "
             f"{'-' if msgs is None else format(msgs, ',.0f')} | {med(rows, 'server_cpu_cores'):.2f} | "
             f"{med(rows, 'client_cpu_cores'):.2f} | {met} |")
L += ["", "## Server-side cost without gRPC (`p4_core_bench`)", "",
      "Single-threaded, in one process, real Coordinator core and SQLite store "
      "(WAL, synchronous=FULL, as the Store) in a fresh directory; microseconds per operation, "
      "medians:", "",
      "| K ranks | core ReportStep (slowest) | core heartbeat | MetricAggregator::Add | "
      "Store::PutMetric (slowest) | SQLite insert, prepare each (as Store) | "
      "SQLite insert, cached statement | SQLite insert, cached, 100 per transaction |",
      "|---|---|---|---|---|---|---|---|"]
for k in sorted({r["workers"] for r in core}):
    rows = [r for r in core if r["workers"] == k]
    L.append(f"| {k} | {med(rows, 'core_report_us'):.1f} ({med(rows, 'core_report_max_us'):,.0f}) | "
             f"{med(rows, 'core_heartbeat_us'):.2f} | {med(rows, 'aggregator_add_us'):.1f} | "
             f"{med(rows, 'store_put_metric_us'):.1f} ({med(rows, 'store_put_metric_max_us'):,.0f}) | "
             f"{med(rows, 'sqlite_prepare_each_us'):.1f} | "
             f"{med(rows, 'sqlite_cached_stmt_us'):.1f} | {med(rows, 'sqlite_batch100_us'):.1f} |")
L += ["", "Raw runs:", "", "```"] + [json.dumps(r) for r in load + core] + ["```", ""]
analysis = os.path.join(os.path.dirname(out), "p4_analysis.md.in")
if os.path.exists(analysis):
    L += [open(analysis).read()]
open(out, "w").write("\n".join(L))
print(open(out).read())
PY
