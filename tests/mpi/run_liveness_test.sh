#!/usr/bin/env bash
# The watchdog's liveness pings under attack from another process on the host (loopback only):
#   run_liveness_test.sh flood ATTACKER -- MPIEXEC ARGS... FAULT_PROGRAM
#     a healthy 2-rank job (DISCO_TIMEOUT=3) calls and syncs for 12 s while the attacker floods
#     every UDP port its ranks bound with junk and forged pings: the job must end with exit 0.
#   run_liveness_test.sh forge ATTACKER -- MPIEXEC ARGS... FAULT_PROGRAM
#     a 2-rank job whose launcher does not end the job when a rank dies, as srun without -K
#     (DISCO_TEST_MPIEXEC_KEEP_GOING, from CMake: Open MPI's --mca orte_enable_recovery 1; exit
#     77 without one: MPICH's hydra ends the job when a rank dies of a signal): the attacker records rank 1's datagrams, kills rank 1, binds
#     its freed port and answers every ping with forged and replayed pongs; the job must still end
#     within DISCO_TIMEOUT + 10 s of the kill, non-zero, naming rank 1.
# The job's processes are found by a token in their environment; their UDP ports in /proc/net/udp
# by their sockets' inodes. Nothing of the job or the attacker is left at the end.
set -uo pipefail
mode=$1 attacker=$2
shift 2
[[ ${1:-} == -- ]] && shift
out=$(mktemp -d)
token="liveness-$$-$RANDOM"  # in the job's environment only (not this script's other children)
job_pid="" attacker_pid=""
cleanup() {
  [[ -n $attacker_pid ]] && kill -KILL "$attacker_pid" 2>/dev/null
  [[ -n $job_pid ]] && kill -KILL -- "-$job_pid" 2>/dev/null
  for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$out/job.log" 2>/dev/null; exit 1; }

job_pids() {  # every process holding the token (mpirun and the ranks)
  grep -lsxzF "DISCO_LIVENESS_TEST_TOKEN=$token" /proc/[0-9]*/environ | cut -d/ -f3
  true
}
rank_pid() {  # the pid of rank $1 (Open MPI, hydra and PMIx launchers each say it their way)
  local pid
  for pid in $(job_pids); do
    grep -qsxzE "(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=$1" "/proc/$pid/environ" && echo "$pid"
  done
  true
}
udp_ports() {  # the local ports of the UDP sockets of process $1, in decimal
  local inodes
  inodes=$(ls -l "/proc/$1/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | sort -u)
  [[ -z $inodes ]] && return 0
  local sl local_address rest inode
  while read -r sl local_address _ _ _ _ _ _ _ inode rest; do
    [[ $sl == sl ]] && continue
    grep -qx "$inode" <<<"$inodes" && echo $((16#${local_address#*:}))
  done </proc/net/udp
  true
}
# Waits (up to 60 s) until both ranks run the soak and have a UDP port; sets rank0/1_pid/port.
wait_for_ranks() {
  local i
  for i in $(seq 600); do
    rank0_pid=$(rank_pid 0) rank1_pid=$(rank_pid 1)
    if [[ -n $rank0_pid && -n $rank1_pid ]] && grep -q "soak: 1 s" "$out/job.log" 2>/dev/null; then
      rank0_port=$(udp_ports "$rank0_pid" | head -1) rank1_port=$(udp_ports "$rank1_pid" | head -1)
      [[ -n $rank0_port && -n $rank1_port ]] && return 0
    fi
    kill -0 "$job_pid" 2>/dev/null || fail "the job ended before it was attacked"
    sleep 0.1
  done
  fail "the job's ranks or their UDP ports did not show up"
}

export DISCO_TIMEOUT=3
case $mode in
  flood)
    # The flood takes a core; on a host loaded besides, rank 0 may go a few seconds without the
    # CPU to answer: a grace of 10 s (DISCO_TIMEOUT, at most 10) tells that from a dead rank.
    export DISCO_TIMEOUT=10 DISCO_TEST_SOAK_S=12
    setsid env DISCO_LIVENESS_TEST_TOKEN="$token" "$@" soak >"$out/job.log" 2>&1 &
    job_pid=$!
    wait_for_ranks
    ports=()
    for p in $(job_pids); do ports+=($(udp_ports "$p")); done
    echo "flooding ports ${ports[*]} of the job's processes"
    "$attacker" flood 60 "${ports[@]}" >"$out/attacker.log" 2>&1 &
    attacker_pid=$!
    for _ in $(seq 600); do kill -0 "$job_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$job_pid" 2>/dev/null && fail "the job did not end within 60 s"
    wait "$job_pid"
    code=$?
    kill -TERM "$attacker_pid" 2>/dev/null
    wait "$attacker_pid" 2>/dev/null
    attacker_pid=""
    cat "$out/job.log" "$out/attacker.log"
    echo "--- job exit code $code"
    [[ $code -eq 0 ]] || fail "a healthy job under a flood of foreign datagrams ended with $code"
    grep -q "soak done" "$out/job.log" || fail "the soak did not finish"
    ;;
  forge)
    if [[ -z ${DISCO_TEST_MPIEXEC_KEEP_GOING:-} ]]; then
      echo "SKIP: this MPI's launcher cannot be told to go on when a rank dies of a signal (hydra"
      echo "ends the job whatever -disable-auto-cleanup says): no job for forged pongs to keep alive"
      exit 77
    fi
    export DISCO_TEST_SOAK_S=120
    read -r -a keep_going <<<"${DISCO_TEST_MPIEXEC_KEEP_GOING:-}"
    setsid env DISCO_LIVENESS_TEST_TOKEN="$token" "$1" "${keep_going[@]}" "${@:2}" soak \
      >"$out/job.log" 2>&1 &
    job_pid=$!
    wait_for_ranks
    echo "rank 0: pid $rank0_pid port $rank0_port; rank 1: pid $rank1_pid port $rank1_port"
    "$attacker" forge 40 "$rank1_pid" "$rank1_port" "$rank0_port" >"$out/attacker.log" 2>&1 &
    attacker_pid=$!
    for _ in $(seq 100); do grep -q "forge: killed" "$out/attacker.log" && break; sleep 0.1; done
    grep -q "forge: killed" "$out/attacker.log" || fail "the attacker did not kill rank 1"
    killed=$SECONDS
    limit=$((DISCO_TIMEOUT + 10))
    while kill -0 "$job_pid" 2>/dev/null && ((SECONDS - killed <= limit + 2)); do sleep 0.2; done
    took=$((SECONDS - killed))
    ended=1
    kill -0 "$job_pid" 2>/dev/null && ended=0
    [[ $ended == 1 ]] && { wait "$job_pid"; code=$?; }
    kill -TERM "$attacker_pid" 2>/dev/null
    wait "$attacker_pid" 2>/dev/null
    attacker_pid=""
    cat "$out/job.log" "$out/attacker.log"
    echo "--- ended=$ended after ${took} s (exit code ${code:-none})"
    [[ $ended == 1 ]] || fail "the job with a dead rank 1 was kept alive by forged pongs for $took s"
    ((took <= limit)) || fail "the job ended $took s after rank 1 died, more than $limit s"
    [[ $code -ne 0 ]] || fail "the job ended with exit 0"
    grep -Eq "watchdog: rank 1 \([^)]*\) stopped answering liveness pings" "$out/job.log" ||
      fail "no line names rank 1 as dead"
    ;;
  *)
    echo "usage: run_liveness_test.sh flood|forge ATTACKER -- MPIEXEC ARGS... FAULT_PROGRAM"
    exit 2
    ;;
esac
# Nothing of the job is left.
for _ in $(seq 50); do [[ -z $(job_pids) ]] && break; sleep 0.1; done
[[ -z $(job_pids) ]] || fail "processes of the job are still running: $(job_pids)"
echo PASS
