#!/usr/bin/env bash
# Soak (issue #8): SOAK_WORKERS simulated workers (default 1000) heartbeating
# plus SOAK_JOBS jobs (default 100, nodes = workers / jobs) whose every rank
# reports one step per second, against a real frameworm-coordinator on
# 127.0.0.1 for SOAK_DURATION_S (default 600); coordinator RSS, open fds,
# database size and ReportStep latency sampled every SOAK_SAMPLE_S (default
# 60); SOAK_WARMUP_S (300) is where "flat after warm-up" is measured from.
# Writes SOAK_OUT (default bench/results/soak.md): the per-sample
# table, verdicts (RSS and fds flat after warm-up, how the database grows,
# p99 < 10 ms in every window) and the raw JSON lines.
#
# Builds soak_bench and frameworm-coordinator first unless SOAK_NO_BUILD=1.
# SOAK_ARGS: more soak_bench flags (e.g.
# "--coordinator-arg=--metric-history=100"). Takes SOAK_DURATION_S plus
# about 10 s. Exit status: soak_bench's (the report is written either way).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WORKERS="${SOAK_WORKERS:-1000}"
JOBS="${SOAK_JOBS:-100}"
DURATION="${SOAK_DURATION_S:-600}"
SAMPLE="${SOAK_SAMPLE_S:-60}"
EXTRA="${SOAK_ARGS:-}"
OUT="${SOAK_OUT:-$ROOT/bench/results/soak.md}"
if [[ "${SOAK_NO_BUILD:-0}" != 1 ]]; then
  cmake --build "$BUILD" --target soak_bench frameworm-coordinator >&2
fi
need "$BIN/frameworm-coordinator" "$BIN/soak_bench"
# A private copy: a rebuild during the run cannot swap the binary under it.
cp "$BIN/frameworm-coordinator" "$TMP/frameworm-coordinator"

# shellcheck disable=SC2206
cmd=("$BIN/soak_bench" --workers="$WORKERS" --jobs="$JOBS"
     --duration-s="$DURATION" --sample-s="$SAMPLE"
     --coordinator="$TMP/frameworm-coordinator" $EXTRA)
envs=$(env | grep -E '^SOAK_[A-Z_]+=' | sort | sed -E "s/^([^=]+)=(.*)$/\1='\2'/" | tr '\n' ' ' || true)
shown="soak_bench --workers=$WORKERS --jobs=$JOBS --duration-s=$DURATION --sample-s=$SAMPLE${EXTRA:+ $EXTRA}"
{
  echo "head=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "dirty=$(git -C "$ROOT" status --porcelain -- coordinator common rpc proto 2>/dev/null | wc -l)"
  echo "coordinator_mtime=$(date -u -r "$BIN/frameworm-coordinator" '+%Y-%m-%d %H:%M:%S UTC')"
  echo "started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$TMP/meta.txt"
echo "soak: $shown (about $((DURATION + 10)) s)" >&2
rc=0
timeout $((DURATION + 300)) "${cmd[@]}" > "$TMP/soak.jsonl" 2> "$TMP/stderr.txt" || rc=$?
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$TMP/meta.txt"
cat "$TMP/stderr.txt" >&2

python3 - "$TMP" "$OUT" "$rc" "$shown" "$envs" <<'PY'
import json, os, statistics, sys
tmp, out, rc, shown, envs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5].strip()
meta = dict(l.rstrip("\n").split("=", 1) for l in open(f"{tmp}/meta.txt") if "=" in l)
lines = [json.loads(l) for l in open(f"{tmp}/soak.jsonl") if l.strip().startswith("{")]
samples = [l for l in lines if "sample" in l]
summary = next((l for l in lines if l.get("summary")), None)
stderr = open(f"{tmp}/stderr.txt").read().strip()
from benchlib import cpu_model
MB = 1 / (1 << 20)
med = statistics.median

L = ["# Soak: 1,000 heartbeating workers plus 100 jobs reporting steps", "",
     f"Command: `{envs + ' ' if envs else ''}FRAMEWORM_BUILD_DIR=<build> bench/soak.sh`, "
     f"which ran `{shown}` "
     f"(exit status {rc}).",
     f"Build: commit {meta.get('head')} ({meta.get('dirty')} files changed in "
     f"coordinator/ common/ rpc/ proto/ since it, by work in progress), "
     f"frameworm-coordinator built {meta.get('coordinator_mtime')}; run started "
     f"{meta.get('started')}.",
     f"Machine: {os.cpu_count()} cores ({cpu_model()}) shared by the load "
     "generator, the coordinator and other engineers' builds (load average "
     f"{meta.get('load_start')} at the start, {meta.get('load_end')} at the end); "
     "127.0.0.1 only.", ""]
if summary:
    s = summary
    L += [
        f"Set-up: a real `frameworm-coordinator` (fresh temporary `--state-dir`, "
        f"default flags{', plus ' + s['coordinator_args'] if s.get('coordinator_args') else ''}); "
        f"{s['workers']} simulated workers (1 slot each) register and keep one "
        f"`WorkerService.Session` stream each (gRPC callback client API over "
        f"{s['session_channels']} connections), heartbeating every "
        f"{s['heartbeat_interval_s']:g} s (the interval the coordinator's "
        "RegisterWorkerResponse gives; the real worker's default too), phases "
        "spread over the second; a StartTask is answered with TaskStatus RUNNING. "
        f"{s['jobs']} jobs of {s['ranks_per_job']} nodes x 1 process are submitted; "
        "every worker got its StartTask (job id, generation, rank, FRAMEWORM_TOKEN) "
        f"after {s['register_s'] + s['attach_s'] + s['start_s']:.2f} s. "
        f"Load for {s['duration_s']:g} s: every rank reports one step every "
        f"{s['step_interval_ms']} ms (a 1 s training step: ranks of a job together, "
        "jobs spread over the second; `TrainerService.ReportStep` with the rank's "
        "token, 2 metric values; at most one report in flight per rank, over "
        f"{s['report_channels']} connections), i.e. {s['workers'] * 1000 / s['step_interval_ms']:,.0f} "
        f"reports/s plus {s['workers'] / s['heartbeat_interval_s']:,.0f} heartbeats/s. "
        "Sample 0 is taken after set-up, before the first report; then one "
        "sample per window. RSS = VmRSS of /proc/<pid>/status; fds = entries of "
        "/proc/<pid>/fd; DB = coordinator.db + -wal + -shm (live files). "
        "Latency is client-side (issue -> completion callback), per window. "
        "WAL checkpoints = seconds in which coordinator.db was written (size or "
        "mtime changed: in WAL mode only a checkpoint writes it); slow seconds = seconds whose slowest report "
        "took >= 20 ms. "
        "The last window ends after every report in flight completed.", ""]

def f(x, d=1): return f"{x:,.{d}f}"
L += ["| sample | t (s) | RSS MiB | peak RSS MiB | threads | fds | DB MiB (of which WAL) | "
      "reports/s | p50 ms | p99 ms | max ms | refused | late | heartbeats/s | "
      "coordinator CPU (cores) | jobs RUNNING | newest step | WAL checkpoints | "
      "slow seconds |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for x in samples:
    first = x["sample"] == 0
    L.append(
        f"| {x['sample']} | {x['t_s']:.0f} | {f(x['rss_kb'] / 1024)} | "
        f"{f(x['rss_hwm_kb'] / 1024)} | {x['threads']} | {x['fds']} | "
        f"{f(x['db_bytes'] * MB)} ({f(x['wal_bytes'] * MB)}) | "
        + ("- | - | - | - | - | - | - | - | " if first else
           f"{f(x['reports_per_s'], 0)} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
           f"{x['max_ms']:.1f} | {x['failed']} | {x['late']} | "
           f"{f(x['heartbeats_per_s'], 0)} | {x['coordinator_cpu_cores']:.2f} | ")
        + f"{x['job_states'].get('RUNNING', 0)} | {x['max_job_step']} | "
        + ("- | - |" if first or "slow_s" not in x else
           f"{len(x['checkpoint_s'])} | {len(x['slow_s'])} |"))
L.append("")

windows = [x for x in samples if x["sample"] > 0]
if summary and windows:
    s = summary
    # Warm-up reference: the first sample at t >= SOAK_WARMUP_S (300 s: the
    # coordinator keeps each job's 256 newest steps in memory, reached after
    # 256 s at one step per second), else the first.
    warmup_s = float(os.environ.get("SOAK_WARMUP_S", "300"))
    ref = next((x for x in windows if x["t_s"] >= warmup_s - 0.5), windows[0])
    if ref is windows[-1] and len(windows) > 1: ref = windows[0]
    last = windows[-1]
    dt_min = max(1e-9, (last["t_s"] - ref["t_s"]) / 60)
    steps = last["sum_job_steps"] - ref["sum_job_steps"]
    rss_g = last["rss_kb"] - ref["rss_kb"]
    rss_pct = 100 * rss_g / ref["rss_kb"]
    flat = abs(rss_pct) <= 5
    rates = [(b["rss_kb"] - a["rss_kb"]) / max(1e-9, (b["t_s"] - a["t_s"]) / 60)
             for a, b in zip(windows, windows[1:])] or [0]
    L += ["## Verdicts", ""]
    L.append(
        f"- **RSS {'flat' if flat else 'not flat'} after warm-up**: "
        f"{ref['rss_kb'] / 1024:.1f} MiB at t={ref['t_s']:.0f} s (sample {ref['sample']}) -> "
        f"{last['rss_kb'] / 1024:.1f} MiB at t={last['t_s']:.0f} s: {rss_pct:+.1f}% "
        f"({rss_g / dt_min:+,.0f} kB/min; per window {min(rates):+,.0f} to "
        f"{max(rates):+,.0f} kB/min; "
        f"{rss_g * 1024 / max(1, steps):,.0f} bytes per aggregated step stored, "
        f"{steps:,} steps over {s['jobs']} jobs in that span). "
        f"Sample 0 (set-up done, no report yet): {samples[0]['rss_kb'] / 1024:.1f} MiB.")
    fds_after = [x["fds"] for x in windows]
    L.append(
        f"- **fds {'flat' if max(fds_after) - min(fds_after) <= 2 else 'not flat'}**: "
        f"{min(fds_after)}-{max(fds_after)} over every window "
        f"(sample 0: {samples[0]['fds']}, before the report connections opened); "
        f"threads {min(x['threads'] for x in windows)}-{max(x['threads'] for x in windows)}.")
    db_g = last["db_bytes"] - samples[0]["db_bytes"]
    L.append(
        f"- **DB size grows with the metric rows, as expected**: live files "
        f"{samples[0]['db_bytes'] * MB:.1f} MiB (sample 0) -> {last['db_bytes'] * MB:.1f} MiB "
        f"(of which WAL {last['wal_bytes'] * MB:.1f} MiB): {s['db_bytes_per_report']:,.0f} bytes "
        f"per report accepted, mostly WAL; after the coordinator's clean shutdown "
        f"(WAL checkpointed into the main file) coordinator.db is "
        f"{s['db_main_bytes_after_stop'] * MB:.1f} MiB: "
        f"{s['db_main_bytes_per_report_after_stop']:,.1f} bytes per report, "
        f"{s['db_main_bytes_per_step_after_stop']:,.0f} bytes per aggregated step row "
        f"({s['steps_stored']:,} rows: {s['jobs']} jobs x about "
        f"{s['steps_stored'] // max(1, s['jobs'])} steps).")
    over = [x for x in windows if x["p99_ms"] >= 10]
    L.append(
        f"- **p99 < 10 ms every window: {'yes' if not over else 'no'}** "
        f"(worst window p99 {max(x['p99_ms'] for x in windows):.2f} ms"
        + (f"; over in windows {', '.join(str(x['sample']) for x in over)}" if over else "")
        + f"; whole run p99 {s['p99_ms']:.2f} ms, p99.9 {s['p999_ms']:.2f} ms, "
        f"max {s['max_ms']:.1f} ms).")
    L.append(
        f"- Medians over the {len(windows)} windows: reports/s "
        f"{med(x['reports_per_s'] for x in windows):,.0f}, p50 "
        f"{med(x['p50_ms'] for x in windows):.2f} ms, p99 "
        f"{med(x['p99_ms'] for x in windows):.2f} ms, max "
        f"{med(x['max_ms'] for x in windows):.1f} ms, heartbeats/s "
        f"{med(x['heartbeats_per_s'] for x in windows):,.0f}, coordinator CPU "
        f"{med(x['coordinator_cpu_cores'] for x in windows):.2f} cores, load "
        f"generator CPU {med(x['load_generator_cpu_cores'] for x in windows):.2f} cores.")
    if "slow_seconds" in s:
        L.append(
            f"- Slow seconds (a second whose slowest report took >= 20 ms): "
            f"{s['slow_seconds']} of {int(s['load_s'])}; {s['slow_seconds_near_checkpoint']} "
            f"of them within 1 s of a WAL checkpoint (coordinator.db written; "
            f"{s['checkpoint_seconds']} such seconds), {s['slow_seconds_machine_busy']} "
            f"with the machine's cores >= 90% busy (`slow_s` in the raw lines: "
            f"[t, max ms, reports over 10 ms, machine busy cores, iowait cores, "
            f"coordinator cores]).")
    L.append(
        f"- Totals: {s['reports_ok']:,} reports accepted, {s['failed']} refused or "
        f"failed, {s['late']} late (a rank's previous report still in flight), "
        f"{s['heartbeats']:,} heartbeats ({s['heartbeats_skipped']} skipped), "
        f"{s['kills']} KillTasks, {s['session_errors']} sessions ended early; "
        f"jobs at the end: {s['job_states']}; coordinator "
        f"{s['coordinator_exit']} on SIGTERM.")
    L.append("")
if rc != 0 or not summary:
    L += [f"**The run failed (exit status {rc}).** soak_bench's stderr:", "",
          "```", stderr[-3000:], "```", ""]
L += ["Raw output (one JSON line per sample, then the summary):", "", "```"]
L += [json.dumps(l) for l in lines] + ["```", ""]
note = os.path.splitext(out)[0] + "_analysis.md.in"
if os.path.exists(note):
    L += [open(note).read()]
open(out, "w").write("\n".join(L))
print(open(out).read())
PY
exit "$rc"
