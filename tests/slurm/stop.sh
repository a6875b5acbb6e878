#!/usr/bin/env bash
# Stop the Slurm daemons tests/slurm/start.sh DIR started (by their pid files; nothing else).
set -uo pipefail
dir=${1:?usage: stop.sh DIR}
for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
done
exit 0
