#!/usr/bin/env bash
# P9: checkpoint copy throughput between two hosts against a plain TCP
# stream over the same veth/bridge path, in the same run: a replica's fetch
# worker to worker (PeerService, mutual TLS), and rank 0's upload to the
# coordinator (mutual TLS). Needs root (network namespaces).
# Writes bench/results/p9_copy.md. Target: ratio >= 0.70.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRIALS="${P9_TRIALS:-3}"
MIB="${P9_MIB:-512}"
OUT="$RESULTS/p9_copy.md"
need "$BIN/p9_copy" "$BIN/frameworm-coordinator" "$BIN/frameworm-worker"
FRAMEWORM_BIN_DIR="$BIN" "$BIN/p9_copy" "$TRIALS" "$MIB" | tee "$TMP/out"
python3 - "$TMP/out" "$OUT" "$TRIALS" "$MIB" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out, trials, mib = sys.argv[2], sys.argv[3], sys.argv[4]
from benchlib import cpu_model; cpu = cpu_model()
s = [r for r in rows if r.get("summary")][0]
lines = ["# P9: checkpoint copy throughput between two hosts", "",
  f"Command: `bench/p9_copy.sh` (P9_TRIALS={trials}, P9_MIB={mib})",
  f"Machine: {os.cpu_count()} cores, {cpu}. Hosts: network + mount namespaces on a bridge",
  "(tests/e2e/hosts.h): the coordinator on host 0, workers on hosts 1 and 2.", "",
  "- peer link: a plain TCP stream of the same size from host 1 to host 2 (what the veth path carries);",
  "- peer: host 2 fetching a checkpoint file held on host 1 the way a replica is copied",
  "  (PeerService.FetchCheckpoint: 1 MiB chunks, mutual TLS with worker certificates; the fetcher",
  "  checks size and CRC-32, writes, fsyncs, renames: `FetchCheckpointFrom`);",
  "- link: a plain TCP stream from host 1 to host 0;",
  "- upload: a job's rank 0 on host 1 sending a checkpoint file the way frameworm-train does",
  "  (UploadCheckpoint: 1 MiB chunks, CRC-32, mutual TLS; the coordinator writes, fsyncs, renames);",
  "- the peer copy's ceilings on the same hosts (bench/p9_tls_stream.h): TLS, a bare mutual-TLS stream",
  "  host 1 -> host 2 with the same certificates (OpenSSL's own choice of protocol and cipher: what any",
  "  encrypted copy at best gets from these cores); disk, host 2 writing and fsyncing the same size where",
  "  the fetch writes (as `dd conv=fdatasync`). The ceiling is the lower of the two.", "",
  "| trial | MiB | peer link (MiB/s) | peer copy (MiB/s) | ratio | TLS stream (MiB/s) | disk (MiB/s) | copy / ceiling | link (MiB/s) | upload (MiB/s) | ratio |",
  "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
  if r.get("summary"): continue
  ceiling = min(r['peer_tls_mib_s'], r['disk_mib_s'])
  lines.append(f"| {r['trial']} | {r['mib']} | {r['peer_link_mib_s']:.0f} | {r['peer_mib_s']:.0f} | "
               f"{r['peer_mib_s']/r['peer_link_mib_s']:.2f} | {r['peer_tls_mib_s']:.0f} | "
               f"{r['disk_mib_s']:.0f} | {r['peer_mib_s']/ceiling:.2f} | {r['link_mib_s']:.0f} | "
               f"{r['upload_mib_s']:.0f} | {r['upload_mib_s']/r['link_mib_s']:.2f} |")
cipher = next((r.get("cipher", "?") for r in rows if not r.get("summary")), "?")
lines += ["", f"Medians: worker to worker {s['peer_mib_s_median']:.0f} MiB/s against a link of "
          f"{s['peer_link_mib_s_median']:.0f} MiB/s, ratio **{s['peer_ratio']:.2f}**; upload to the "
          f"coordinator {s['upload_mib_s_median']:.0f} MiB/s against {s['link_mib_s_median']:.0f} MiB/s, "
          f"ratio **{s['ratio']:.2f}** (target >= 0.70).",
  f"Against what these hosts allow an encrypted copy: the bare TLS stream ({cipher}) carried "
  f"{s['peer_tls_mib_s_median']:.0f} MiB/s, {s['peer_tls_mib_s_median']/s['peer_link_mib_s_median']:.2f} "
  f"of the plain link, and the disk took {s['disk_mib_s_median']:.0f} MiB/s; the worker-to-worker copy "
  f"is **{s['peer_ceiling_ratio']:.2f}** of the lower of the two (medians).", "",
  "Where the time goes (measured separately, loopback, no namespaces, 1 GiB into /dev/shm: `p9_copy --serve 1024`",
  "and `p9_copy --fetch 127.0.0.1 1024 CRC` with P9_SECRET, old and new builds alternately, 3 rounds, 2026-12-04):",
  "fetch wall median 1.89 s against 2.33 s before the fetcher wrote and checksummed on its own thread",
  "(common/queued_file.h), CRC-32 was folded with PCLMULQDQ (common/crc32.h: 3.4x zlib's on 64 MiB) and",
  "the senders stopped zero-filling each chunk: fetcher CPU 1.79 s against 2.2-2.3 s, serving CPU 1.24 s",
  "against 1.46 s. Both cores stay busy: the fetcher's profile is memmove 16% (protobuf copying each",
  "chunk out of gRPC's buffers), socket and page-cache copies 15%, TLS and wake-ups most of the rest;",
  "the server's the same copies the other way. The plain TCP link needs none of the TLS, CRC or",
  "user-space copies, which is why the ratio stays near 0.2 on this 2-core machine, with the disk or without",
  "it. The TLS-stream column bounds any encrypted copy on these cores: about half the plain link (2026-12-05;",
  "it gathers its 16 KiB records into 1 MiB socket writes and sets TCP_NODELAY as gRPC does, else it",
  "measured 450 MiB/s), so 0.70 of the link is out of reach with TLS here; the copy reaches about half",
  "of that bound, the rest going to gRPC's framing, protobuf and slice copies and the fetcher's CRC and write.",
  "P9_STREAMS=N makes the fetch use N streams at once (ranges; automatic: one on this machine): on loopback",
  "into a tmpfs, 1 GiB, 3 rounds (2026-12-05), 1, 2 and 3 streams fetched 679, 697 and 655 MiB/s (medians),",
  "the same within the spread: with both cores busy, a second stream has no core to run on.",
  "Trials vary widely: each writes and fsyncs 1.5 GiB, and the disk's write-back of the previous",
  "trials competes with the next; the link itself measured 1.8-3.5 GiB/s across runs of the same day."]
from benchlib import write_report; write_report(out, lines)
PY
