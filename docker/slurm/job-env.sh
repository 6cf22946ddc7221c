# Sourced by docker/slurm/sweep.sbatch: what one Slurm job keeps to itself on a node it may share with other jobs
# and other users (ray #59551, #10154, #43778: port collisions, a shared /tmp/ray, another user's Ray).
#
# Every port the job opens comes from one block of MM_PORT_BLOCK ports derived from SLURM_JOB_ID (ids are unique
# per cluster, so two running jobs differ), moved to the next block while a port of it is already taken on this
# node (a job of another cluster, or an id 400 blocks apart). Ray's temp folder is per user and per job on the
# node's local disk (Ray's default /tmp/ray is shared by every user of a node), and short: Ray puts Unix sockets in
# it, whose paths may not exceed 107 bytes.

MM_PORT_FIRST=20000   # blocks lie in [20000, 60000): above the usual services, below Linux's ephemeral ports
MM_PORT_BLOCK=100
MM_PORT_BLOCKS=400

# The first port of this job's block for job id $1, before checking what is free.
mm_port_base() {
  echo $(( MM_PORT_FIRST + ($1 % MM_PORT_BLOCKS) * MM_PORT_BLOCK ))
}

# 0 if nothing listens on TCP port $1 of this node (bash's /dev/tcp: no extra tool needed on a compute node).
mm_port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The first port of a block, starting at job id $1's, whose ports the job uses are all free here; fails after
# trying every block.
mm_free_port_base() {
  local base i offset ok
  base=$(mm_port_base "$1")
  for (( i = 0; i < MM_PORT_BLOCKS; i++ )); do
    ok=1
    for offset in 0 1 2 3 4 5 6 7 8 20 99; do
      mm_port_free $(( base + offset )) || { ok=0; break; }
    done
    [ $ok = 1 ] && { echo "$base"; return 0; }
    base=$(( base + MM_PORT_BLOCK ))
    [ "$base" -ge $(( MM_PORT_FIRST + MM_PORT_BLOCKS * MM_PORT_BLOCK )) ] && base=$MM_PORT_FIRST
  done
  local end=$(( MM_PORT_FIRST + MM_PORT_BLOCKS * MM_PORT_BLOCK ))
  echo "error: no free block of $MM_PORT_BLOCK ports in [$MM_PORT_FIRST, $end) on $(hostname -s)" >&2
  return 1
}

# `ray start` port options for the block starting at $1: GCS, raylet, object manager, client server, dashboard
# agent, metrics, runtime-env agent, and the workers' range (80 ports: at most 80 worker processes per node).
mm_ray_port_args() {
  local b=$1
  echo "--node-manager-port=$(( b + 1 )) --object-manager-port=$(( b + 2 )) --ray-client-server-port=$(( b + 3 ))" \
       "--dashboard-agent-listen-port=$(( b + 4 )) --dashboard-agent-grpc-port=$(( b + 5 ))" \
       "--metrics-export-port=$(( b + 6 )) --runtime-env-agent-port=$(( b + 7 ))" \
       "--min-worker-port=$(( b + 20 )) --max-worker-port=$(( b + 99 ))"
}

# The MLflow server's port in the block starting at $1.
mm_mlflow_port() {
  echo $(( $1 + 8 ))
}

# Ray's temp folder on this node for uid $1 and job id $2 (MM_RAY_TMP overrides the parent, default /tmp).
mm_ray_tmp() {
  echo "${MM_RAY_TMP:-/tmp}/mm-$1-$2"
}

# Stop (TERM, then KILL after 10 s) this user's processes whose command line names folder $1, the job's Ray temp
# folder: only this job's Ray processes do; found in /proc and stopped by process id.
mm_stop_strays() {
  local pids pid t
  pids=$(grep -lsaF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | grep -vx "$$" || true)
  [ -n "$pids" ] || return 0
  for pid in $pids; do kill "$pid" 2>/dev/null || true; done
  for (( t = 0; t < 10; t++ )); do
    pids=$(for pid in $pids; do if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi; done)
    [ -n "$pids" ] || return 0
    sleep 1
  done
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
}
