#!/usr/bin/env bash
# A real single-node Slurm (slurmctld + slurmd + munged) on 127.0.0.1 for the tests, as root.
#
#   tests/slurm/start.sh DIR      start it; everything (config, key, state, logs) lives in DIR;
#                                 prints SLURM_CONF=DIR/slurm.conf once the node takes jobs
#   tests/slurm/stop.sh DIR       stop the daemons this script started (by their pid files)
#
# Needs the Debian packages slurm-wlm and munge (`.ci/run` installs them). In a container the
# cgroup plugins cannot run: process tracking by /proc (proctrack/linuxproc), no task plugin, no
# job accounting gather. No accounting database (accounting_storage/none: `sacct` answers
# nothing); finished jobs are written by jobcomp/filetxt to DIR/jobcomp.txt. Ports are free
# ports chosen at start; nothing is read from or written to /etc.
set -euo pipefail
dir=${1:?usage: start.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
for cmd in slurmctld slurmd munged scontrol sinfo python3; do
  command -v "$cmd" >/dev/null || { echo "start.sh: $cmd not found (apt-get install slurm-wlm munge)" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "start.sh: slurmd must run as root here" >&2; exit 3; }
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/log"
chmod 700 "$dir/munge"

# --- munge: a fresh key, a socket of our own --------------------------------------------------
key="$dir/munge/munge.key"
[ -s "$key" ] || { head -c 1024 /dev/urandom >"$key"; chmod 400 "$key"; }
socket="$dir/munge/munge.socket"
if ! [ -S "$socket" ] || ! [ -s "$dir/munge/munged.pid" ] || ! kill -0 "$(cat "$dir/munge/munged.pid")" 2>/dev/null; then
  munged --force --socket="$socket" --key-file="$key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --num-threads=2
fi

# --- slurm.conf ----------------------------------------------------------------------------------
read -r pctl pd < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
conf="$dir/slurm.conf"
cat >"$conf" <<CONF
ClusterName=metaprov
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$pctl
SlurmdPort=$pd
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=2
MinJobAge=600
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=60 State=UP
CONF
export SLURM_CONF="$conf"

# --- the daemons ------------------------------------------------------------------------------------
slurmctld -c -f "$conf" -i  # -c: a clean start (no state of an earlier test); forks, writes its pid file
slurmd -f "$conf" -N localhost
for _ in $(seq 1 100); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -n1 || true)
  if [ "$state" = idle ]; then
    echo "SLURM_CONF=$conf"
    exit 0
  fi
  sleep 0.2
done
echo "start.sh: the node did not become idle (state: ${state:-none}); logs in $dir/log" >&2
tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
exit 4
