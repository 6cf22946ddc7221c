#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for `make test-slurm` (docker/slurm/README.md, "Run for real here").
#   docker/slurm/local-cluster.sh start DIR   # MUNGE (if none answers), slurmctld and slurmd, all state under DIR
#   docker/slurm/local-cluster.sh stop DIR    # stops what `start DIR` started, by the pid files in DIR
# Then `export SLURM_CONF=DIR/slurm.conf` for sbatch, squeue, scontrol.
#
# Needs root (slurmd runs jobs as their submitting user) and Debian's packages:
#   apt-get install slurm-wlm munge
# The node declares MM_SLURM_CPUS CPUs (default 4) whatever the machine has (SlurmdParameters=config_overrides), so
# that two 2-CPU jobs run side by side even on a 2-core machine: the test is about ports and folders, not speed.
# One node only: Debian's slurmd is built without --enable-multiple-slurmd, so `slurmd -N` cannot run a second node
# name on the same host (checked: it refuses the second daemon).
set -euo pipefail

action=${1:-}
DIR=${2:-}
[ -n "$action" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
CONF=$DIR/slurm.conf
NODE=$(hostname -s)
CPUS=${MM_SLURM_CPUS:-4}
CTLD_PORT=${MM_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${MM_SLURMD_PORT:-6818}

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_answers; then return; fi
  command -v munged >/dev/null || { echo "error: munged not found: apt-get install munge" >&2; exit 1; }
  [ -s /etc/munge/munge.key ] || {
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  }
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- munged  # forks; its pid file is /run/munge/munged.pid, written as the munge user
  for _ in $(seq 20); do munge_answers && break; sleep 0.5; done
  cp /run/munge/munged.pid "$DIR/munged.pid"  # `stop DIR` stops munged only if this run started it
  munge_answers || { echo "error: munged started but does not answer" >&2; exit 1; }
  echo "[slurm] started munged (pid $(cat "$DIR/munged.pid"))"
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  cat > "$CONF" <<EOF
# Written by docker/slurm/local-cluster.sh: a one-node cluster for make test-slurm
ClusterName=mutexmatch-test
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobRequeue=1
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
MailProg=/bin/true
KillWait=30
MinJobAge=3600
NodeName=$NODE CPUs=$CPUS RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

stop_pid_file() {  # $1: pid file, $2: name
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "[slurm] stopped $2 (pid $pid)"
  fi
  rm -f "$f"
}

case $action in
  start)
    command -v slurmctld >/dev/null || { echo "error: slurmctld not found: apt-get install slurm-wlm munge" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { echo "error: the local Slurm cluster needs root (slurmd runs jobs as their users)" >&2; exit 1; }
    start_munge
    write_conf
    export SLURM_CONF=$CONF
    slurmctld -f "$CONF" -i   # -i: ignore state left by an earlier run in DIR
    for _ in $(seq 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 1; done
    slurmd -f "$CONF"
    for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -qx idle && break; sleep 1; done
    sinfo -h -o %t | grep -qx idle || { echo "error: the node is not idle:" >&2; sinfo -N -l >&2;
                                        tail -20 "$DIR/log/slurmd.log" >&2; exit 1; }
    echo "[slurm] slurmctld (pid $(cat "$DIR/slurmctld.pid")) and slurmd (pid $(cat "$DIR/slurmd.pid")) up:" \
         "node $NODE, $CPUS CPUs; export SLURM_CONF=$CONF"
    ;;
  stop)
    if [ -s "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
      # jobs outlive the daemons (slurmstepd keeps running them): cancel this cluster's jobs first
      export SLURM_CONF=$CONF
      jobs=$(squeue -h -o %i 2>/dev/null || true)
      if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086
        scancel $jobs || true
        for _ in $(seq 90); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 1; done
        echo "[slurm] cancelled jobs $(echo $jobs)"
      fi
    fi
    stop_pid_file "$DIR/slurmd.pid" slurmd
    stop_pid_file "$DIR/slurmctld.pid" slurmctld
    stop_pid_file "$DIR/munged.pid" munged   # only when `start` started it
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
