#!/usr/bin/env bash
# P6 on separate hosts (the multi-host harness, mutual TLS): detection and
# resume after a host's worker is killed with SIGKILL, and detection and
# fencing after a host's link goes down. Runs those two end-to-end cases
# P6_TRIALS times and reads the figures they record (gtest XML properties).
# Needs root. Writes bench/results/p6_hosts.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRIALS="${P6_TRIALS:-3}"
OUT="$RESULTS/p6_hosts.md"
need "$BIN/multihost_e2e_test"
for i in $(seq 1 "$TRIALS"); do
  FRAMEWORM_BIN_DIR="$BIN" "$BIN/multihost_e2e_test" \
    --gtest_filter='*KilledWorkerJobResumes*:*PartitionedHost*' \
    --gtest_output="xml:$TMP/run-$i.xml" >"$TMP/run-$i.log" 2>&1 || {
      echo "p6_hosts: trial $i failed; see the log below" >&2; tail -30 "$TMP/run-$i.log" >&2; exit 1; }
done
python3 - "$TMP" "$OUT" "$TRIALS" <<'PY'
import glob, os, statistics, sys, xml.etree.ElementTree as ET
tmp, out, trials = sys.argv[1], sys.argv[2], sys.argv[3]
from benchlib import cpu_model; cpu = cpu_model()
kill, part = [], []
for f in sorted(glob.glob(f"{tmp}/run-*.xml")):
  for tc in ET.parse(f).getroot().iter("testcase"):
    props = {p.get("name"): float(p.get("value")) / 1000 for p in tc.iter("property")}
    if "KilledWorker" in tc.get("name"): kill.append(props)
    if "Partitioned" in tc.get("name"): part.append(props)
med = lambda rows, k: statistics.median(r[k] for r in rows)
lines = ["# P6 on separate hosts: recovery after a lost host", "",
  f"Command: `bench/p6_hosts.sh` (P6_TRIALS={trials}); {os.cpu_count()} cores, {cpu}.",
  "Hosts: network + mount namespaces on a bridge, no shared /tmp, mutual TLS (tests/e2e/hosts.h);",
  "a 2-node CNN job on Fashion-MNIST, heartbeat_timeout 3 s, a spare third host.", "",
  "| case | detection (s) | resume / fenced (s) |", "|---|---|---|"]
for r in kill:
  lines.append(f"| worker of node rank 0 SIGKILLed | {r['detection_ms']:.2f} | resume {r['resume_ms']:.2f} |")
for r in part:
  lines.append(f"| link down (partition) | {r['detection_ms']:.2f} | cut-off trainer fenced {r['fenced_after_ms']:.2f} |")
lines += ["", f"Medians: killed worker: detection {med(kill,'detection_ms'):.2f} s, first step of the new generation "
          f"{med(kill,'resume_ms'):.2f} s after the kill (resumed on a host that never had the checkpoint);",
          f"partition: detection {med(part,'detection_ms'):.2f} s (target: timeout + 1 s = 4 s), "
          f"fenced {med(part,'fenced_after_ms'):.2f} s after the cut.",
          "Times are polled every 100 ms (upper bounds by up to 0.1 s)."]
from benchlib import write_report; write_report(out, lines)
PY
