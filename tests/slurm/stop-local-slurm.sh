#!/usr/bin/env bash
# (disco carries its own copy of the one-node cluster recipe from ../shared/slurm/.)
# stop-local-slurm.sh - stop the single-node Slurm cluster started by
# start-local-slurm.sh. Only the daemons recorded in its pidfiles are stopped
# (and only if the pid still belongs to a process of the expected name);
# nothing is killed by name. A munged that the start script found already
# running (and reused) has no pidfile here and is left alone.
#
#   LOCAL_SLURM_DIR          same as for the start script [/tmp/local-slurm]
#   LOCAL_SLURM_CONF         same as for the start script [/etc/slurm/slurm.conf]
#   LOCAL_SLURM_KEEP_MUNGE=1 leave our munged running
#   LOCAL_SLURM_PURGE=1      also delete LOCAL_SLURM_DIR (state, logs) afterwards
set -euo pipefail
export PATH="${PATH:-/usr/bin:/bin}:/usr/sbin:/sbin"

DIR=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
CONF=${LOCAL_SLURM_CONF:-/etc/slurm/slurm.conf}
export SLURM_CONF="$CONF"

pid_of() {  # pid_of PIDFILE NAME -> prints pid if it is alive and named NAME*
  local pidf=$1 name=$2 pid comm
  [ -s "$pidf" ] || return 1
  pid=$(tr -dc '0-9' < "$pidf")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$name"* ]] || return 1
  echo "$pid"
}

# stop_all PIDFILE:NAME... - SIGTERM every live one at once, wait up to 10 s,
# then SIGKILL whatever is left. Only pids read from our pidfiles are signalled.
stop_all() {
  local spec pidf name pid
  local -a pids=() names=() pidfs=()
  for spec in "$@"; do
    pidf=${spec%%:*}; name=${spec##*:}
    if pid=$(pid_of "$pidf" "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$name"); pidfs+=("$pidf")
    else
      [ -e "$pidf" ] && echo "$name: not running (stale pidfile removed)"
      rm -f "$pidf"
    fi
  done
  local i alive
  for _ in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do [ -e "/proc/$pid" ] && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    if [ -e "/proc/$pid" ]; then
      echo "${names[$i]}: pid $pid did not exit after 10 s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 20); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    fi
    echo "${names[$i]}: stopped (pid $pid)"
    rm -f "${pidfs[$i]}"
  done
}

# Cancel the jobs of *our* controller first, so that no slurmstepd / job
# processes outlive slurmd.
if pid_of "$DIR/run/slurmctld.pid" slurmctld >/dev/null && pid_of "$DIR/run/slurmd.pid" slurmd >/dev/null; then
  jobs=$(squeue -h -o '%A' 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    echo "cancelling jobs: $(tr "\n" " " <<<"$jobs")"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(squeue -h -t running,completing -o '%A' 2>/dev/null || true)" ] && break
      sleep 0.1
    done
  fi
fi

targets=("$DIR/run/slurmd.pid:slurmd" "$DIR/run/slurmctld.pid:slurmctld")
[ "${LOCAL_SLURM_KEEP_MUNGE:-0}" = 1 ] || targets+=("$DIR/run/munged.pid:munged")
stop_all "${targets[@]}"
if [ "${LOCAL_SLURM_PURGE:-0}" = 1 ]; then
  rm -rf "${DIR:?}"
  echo "removed $DIR"
fi
