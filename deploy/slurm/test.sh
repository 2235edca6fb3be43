#!/usr/bin/env bash
# Runs deploy/slurm/frameworm.sbatch on a real single-host Slurm that this
# script starts and stops itself: munged, slurmctld and slurmd (Debian's
# packages) as root, on ports 16817/16818, with their state under a
# temporary directory; the node is this host (its short hostname, 2 CPUs
# declared). The job (an MLP on Fashion-MNIST, 1 node) must succeed through
# sbatch --wait, with the coordinator, worker and CLI all started by the
# batch script. A ctest (slurm_test); fails, never skips, when it cannot run.
#   deploy/slurm/test.sh BIN_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:?usage: deploy/slurm/test.sh BIN_DIR}"
fail() { echo "slurm test: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (to run munged, slurmctld and slurmd)"
for p in munged slurmctld slurmd sbatch scontrol; do
  command -v "$p" > /dev/null || fail "$p is missing: deploy/dev.sh install installs slurmctld, slurmd, slurm-client and munge"
done
T="$(mktemp -d /tmp/frameworm-slurm.XXXXXX)"
chmod 755 "$T"
H="$(hostname -s)"
mkdir -p "$T"/{state,spool,log,munge,submit}
chmod 700 "$T/munge"
cleanup() {
  for f in "$T/slurmd.pid" "$T/slurmctld.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  [ -f "$T/munge/munged.pid" ] && kill "$(cat "$T/munge/munged.pid")" 2>/dev/null || true
  sleep 0.5
  rm -rf "$T"
}
trap cleanup EXIT
head -c 1024 /dev/urandom > "$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
munged -f --key-file="$T/munge/munge.key" --socket="$T/munge/munge.sock" \
  --log-file="$T/log/munged.log" --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/seed" \
  || fail "munged did not start: $(cat "$T/log/munged.log" 2>/dev/null)"
cat > "$T/slurm.conf" <<CONF
ClusterName=frameworm-test
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$H NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=30 State=UP
CONF
export SLURM_CONF="$T/slurm.conf"
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -5 "$T/log/slurmctld.log")"
slurmd -f "$SLURM_CONF" -N "$H" || fail "slurmd did not start: $(tail -5 "$T/log/slurmd.log")"
for _ in $(seq 1 50); do
  sinfo -h -o %t 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %t | grep -q idle || fail "the node did not come up: $(sinfo 2>&1; tail -5 "$T/log/slurmctld.log")"

cat > "$T/submit/job.yaml" <<JOB
name: slurm-mlp
nodes: 1
nproc_per_node: 1
backend: gloo
train:
  model: mlp
  dataset: fashion-mnist
  max_steps: 60
  batch_size: 32
JOB
cd "$T/submit"
rc=0
FRAMEWORM_BIN="$BIN" timeout 300 sbatch --wait --nodes=1 --time=10 -o "$T/submit/out.txt" \
  "$ROOT/deploy/slurm/frameworm.sbatch" "$T/submit/job.yaml" > /dev/null || rc=$?
out="$(cat "$T/submit/out.txt" 2>/dev/null || true)"
echo "$out"
[ "$rc" -eq 0 ] || fail "sbatch --wait exited $rc"
for want in "coordinator on $H:" "1 of 1 workers up" "job_finished" "SUCCEEDED" '"event":"done"' \
            "ended with exit code 0"; do
  grep -qF "$want" <<< "$out" || fail "the batch output lacks '$want'"
done
ls "$T/submit"/.frameworm-* > /dev/null 2>&1 && fail "the allocation's certificates were left behind"
echo "ok: frameworm.sbatch ran a job to SUCCEEDED on a real Slurm"
