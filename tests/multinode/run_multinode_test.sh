#!/usr/bin/env bash
# The multi-node stage of ./launch/test: disco's suites with ranks on two virtual nodes
# (tests/multinode/vcluster.sh), the batch jobs on a two-node Slurm, and the faults a cluster has.
# One PASS/FAIL line per case with its time; exit 0 when every case passed, 77 (with the reason)
# where the cluster cannot be made (not root, no namespaces).
#   tests/multinode/run_multinode_test.sh BUILD_DIR [--only REGEX] [--keep] [--all-faults]
# Needs root. Every job runs under a time limit with DISCO_TIMEOUT=20, so a hang costs seconds.
# --keep leaves the cluster up afterwards (vcluster.sh stop removes it). --all-faults adds a node
# whose processes are all killed (under mpirun and srun) to the node cut off the network.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run_multinode_test.sh BUILD_DIR [--only REGEX] [--keep] [--all-faults]}" && pwd)
shift
only="" keep=0 all_faults=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --all-faults) all_faults=1; shift ;;
    *) echo "run_multinode_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
vc=$here/vcluster.sh
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the virtual cluster needs root"; exit 77; fi
if ! unshare --net --mount true 2>/dev/null; then
  echo "SKIP: this machine refuses network and mount namespaces (a container without them?)"
  exit 77
fi
for f in tests/disco_mpi_tests tests/disco_fault_program tests/disco_h5_save_program \
  tests/disco_remote_tests src/tools/disco-bench; do
  [[ -x $build/$f ]] || { echo "run_multinode_test: no $build/$f (build the tests first)"; exit 2; }
done
# A build or checkout under /tmp must stay visible on the nodes (each has its own /tmp).
shared=""
for d in "$build" "$root"; do [[ $d == /tmp/* ]] && shared+="${shared:+:}/tmp/$(cut -d/ -f3 <<<"$d")"; done
export VC_SHARED_TMP=$shared
out=$build/multinode
rm -rf "$out"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export DISCO_TIMEOUT=20
# Files every worker reads or writes: the build tree, which every node sees.
export DISCO_TEST_SHARED_DIR=$out/shared
started=$SECONDS
fail=0
summary=()

cleanup() { ((keep)) || "$vc" stop >/dev/null 2>&1; }
trap cleanup EXIT
"$vc" start 2 > "$out/cluster.log" 2>&1 || { cat "$out/cluster.log"; echo "FAIL: the cluster did not start"; exit 1; }

# Open MPI 4.1.4 (Debian's) now and then crashes inside MPI_Init when srun --mpi=pmix starts ranks
# on a loaded machine (1 job start in 40 to 300 here, beside two busy loops; a 10-line MPI hello
# program crashes alike): a jump to address 0 from the TCP BTL's event callback during MPI_Init,
# at times with "A system call failed during shared memory initialization" beside it (cores showed
# ompi_mpi_init -> opal_progress -> mca_btl_tcp.so -> 0x0, its active-message table still empty).
# It is Open MPI's race, before any of disco runs; a case whose log shows that report alone (below)
# runs once more, and its line says so.
# Open MPI's report goes to a file of its own per rank (opal_stacktrace_output=file:), appended to
# the case's log after it ran: on stderr it is lost under srun --kill-on-bad-exit (disco-run's),
# which ends the step as soon as the rank dies, often before slurmstepd has forwarded the rank's
# last lines ("srun: error: node1: task 0: Segmentation fault" alone: nothing to tell Open MPI's
# crash from disco's). Every node sees the build tree, so the files land beside the logs.
# Its report is always the same: a SIGSEGV at address (nil) whose stack holds one frame, libc's
# signal return ([ 0] libc.so.6(+0x...)): the jump to 0 leaves nothing to unwind. Only that report,
# alone, is retried; a crash with frames, another signal or address, or a truncated report fails.
# (A disco bug that calls through a null pointer reports the same: it is retried once, and the
# case's line says so, its first log kept.)
openmpi_init_crash() {
  awk '/\*\*\* Process received signal \*\*\*/ { n++; ok = 0 }
       /Signal: Segmentation fault/ || /Failing at address: \(nil\)/ { ok++ }
       /\] \[ *[0-9]+\] / { if ($0 ~ /\[ *0\] [^ ]*libc\.so[^ ]*\(\+0x[0-9a-f]+\)/) ok++; else bad = 1 }
       /\*\*\* End of error message \*\*\*/ { if (ok != 3) bad = 1; ended++ }
       END { exit !(n > 0 && ended == n && !bad) }' "$1"
}
# run_case LOG LIMIT CMD...: CMD with Open MPI's signal reports in files, appended to LOG.
run_case() {
  local log=$1 limit=$2 rc=0 reports=$out/shared/signals/${1##*/} f
  shift 2
  rm -rf "$reports" && mkdir -p "$reports"
  OMPI_MCA_opal_stacktrace_output=file:$reports/rank timeout -k 5 "$limit" "$@" > "$log" 2>&1 ||
    rc=$?
  for f in "$reports"/rank.*; do
    [[ -f $f ]] || continue
    echo "--- Open MPI's signal report (rank.VPID.PID: ${f##*/}):"
    cat "$f"
  done >> "$log"
  return $rc
}
# case NAME LIMIT CMD...: PASS when CMD exits 0 within LIMIT seconds; its output in NAME.log.
case_() {
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  [[ -z $only || $name =~ $only ]] || return 0
  run_case "$out/$name.log" "$limit" "$@" || rc=$?
  local line retried=""
  if ((rc != 0)) && openmpi_init_crash "$out/$name.log"; then
    mv "$out/$name.log" "$out/$name.first.log"
    retried=", retried: Open MPI crashed in MPI_Init (see $name.first.log)"
    rc=0
    run_case "$out/$name.log" "$limit" "$@" || rc=$?
  fi
  if ((rc == 0)); then
    line=$(printf 'PASS  %-40s %4d s%s' "$name" $((SECONDS - t0)) "${retried:+  (${retried#, })}")
  else
    fail=1
    line=$(printf 'FAIL  %-40s %4d s  (exit %d%s%s)' "$name" $((SECONDS - t0)) "$rc" \
      "$( ((rc == 124 || rc == 137)) && echo ", killed at ${limit} s")" "$retried")
  fi
  echo "$line"
  summary+=("$line")
  if ((rc != 0)); then
    sed 's/\x1b\[[0-9;]*m//g' "$out/$name.log" | grep -Ev '^\[ +(RUN|OK) +\]|^  command #' | tail -20 |
      sed 's/^/    | /'
  fi
}
# expect NAME LIMIT EXIT NEEDLE CMD...: PASS when CMD ends within LIMIT with a non-zero exit (or
# EXIT itself) and its output has NEEDLE.
expect() {
  local name=$1 limit=$2 want=$3 needle=$4
  shift 4
  case_ "$name" "$limit" bash -c '
    want=$1 needle=$2; shift 2
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    echo "--- exit $rc"
    [[ $want == nonzero && $rc -ne 0 || $rc == "$want" ]] || { echo "expected exit $want"; exit 1; }
    grep -Eq -- "$needle" <<<"$out" || { echo "no \"$needle\" in the output"; exit 1; }' \
    _ "$want" "$needle" "$@"
}

mpi=("$vc" mpirun -x DISCO_TIMEOUT -x OMPI_MCA_mpi_yield_when_idle -x DISCO_TEST_SHARED_DIR)
h22=(-np 4 --host node1:2,node2:2)
tests=$build/tests/disco_mpi_tests

# ---- The suites across nodes (mpirun on node1, orted on node2 through the rsh agent) ----------
case_ mpirun.session.2x2 240 "${mpi[@]}" "${h22[@]}" "$tests" --gtest_filter='Session*'
case_ mpirun.ccl.2x2 240 "${mpi[@]}" "${h22[@]}" "$tests" --gtest_filter='Ccl*'
# Without shared memory (MPI's collectives and disco's ring over TCP), and with the frame after
# each collective call preposted (MPI_Ibcast across the nodes; auto does it above 4 ranks).
case_ mpirun.ccl.noshm.2x2 240 "${mpi[@]}" "${h22[@]}" -x DISCO_CCL_SHM=0 -x DISCO_PREPOST_FRAMES=1 \
  "$tests" --gtest_filter='Ccl*'
case_ mpirun.h5.2x2 240 "${mpi[@]}" "${h22[@]}" "$tests" --gtest_filter='H5*'
# The remote suite: the served job spans both nodes; the client runs on node1 (rank 0's loopback).
case_ mpirun.remote.2x2 300 env DISCO_TEST_CLIENT_PREFIX="$vc exec node1" \
  "$root/tests/remote/run_remote_test.sh" 4 "$tests" "$build/tests/disco_remote_tests" -- \
  "${mpi[@]}" "${h22[@]}"
# A per-job setting given where mpirun runs only (no -x): rank 0's value is everyone's.
case_ mpirun.knob-not-forwarded.2x2 120 env DISCO_CCL_SHM=0 DISCO_H5_INDEPENDENT=1 \
  "${mpi[@]}" "${h22[@]}" "$tests" --gtest_filter='CclTest.AllReduce*:H5Test.EveryDType*'
# A save into a directory that only node1 has (each node has its own /tmp).
"$vc" exec node1 mkdir -p /tmp/only-on-node1
expect mpirun.save-dir-on-one-node 60 3 "not writable on node2" \
  "${mpi[@]}" "${h22[@]}" "$build/tests/disco_h5_save_program" add /tmp/only-on-node1/x.h5 w 64
# A save into a directory that each node has, but its own (a node-local /tmp): not one file.
expect mpirun.save-node-local-dir 60 3 "is not the one rank 0 writes to" \
  "${mpi[@]}" "${h22[@]}" "$build/tests/disco_h5_save_program" add /tmp/disco-node-local.h5 w 64

# ---- The timeline across hosts: node2 given a boot id of its own (bound over
# /proc/sys/kernel/random/boot_id in its mount namespace), as a second machine has, so that its
# ranks' clocks are aligned to rank 0's by MPI round trips. The clocks are in truth one: every
# offset found must lie within its error bound, and the error must be that of a round trip (not 0).
trace_across() {
  local fake=$out/shared/boot_id json=$out/shared/across.json rc=0
  mkdir -p "$out/shared"
  echo "00000000-0000-4000-8000-$(printf '%012d' $$)" > "$fake"
  "$vc" exec node2 mount --bind "$fake" /proc/sys/kernel/random/boot_id || return 1
  "${mpi[@]}" "${h22[@]}" -x DISCO_TRACE="$json" "$build/tests/disco_fault_program" clean || rc=1
  "$vc" exec node2 umount /proc/sys/kernel/random/boot_id || rc=1
  ((rc == 0)) || return 1
  local py
  py=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
  PYTHONPATH=$build/python "${py:-python3}" -m disco.trace --check "$json" || return 1
  "${py:-python3}" - "$json" <<'PY' || return 1
import json, sys
doc = json.load(open(sys.argv[1]))
clock = [e for e in doc["traceEvents"] if e.get("name") == "clock" and e.get("ph") == "M"][0]["args"]
print("clock alignment:", clock)
assert clock["max_error_us"] > 0, "no rank was aligned by round trips"
assert clock["max_offset_us"] <= clock["max_error_us"] + 0.001, "an offset outside its error bound"
assert doc["otherData"]["ranks"] == 4
PY
}
case_ mpirun.trace-across-hosts.2x2 120 bash -c "$(declare -f trace_across); $(declare -p mpi h22 out build vc); trace_across"

# ---- Slurm: sbatch -N 2 and srun --mpi=pmix across the nodes -----------------------------------
if "$vc" slurm-start > "$out/slurm.log" 2>&1; then
  on1=("$vc" exec node1)
  export DISCO_ROOT=$root DISCO_BUILD_DIR=$build
  # The smoke job (srun --mpi=pmix through disco-run, at 2..4 ranks over both nodes).
  # sbatch_wait OUT ARGS...: sbatch --wait with the job's output (OUT) in the case's log.
  sbatch_wait() {
    local o=$1 rc=0
    shift
    "${on1[@]}" sbatch --wait -N 2 --ntasks-per-node=2 -t 10 -o "$o" "$@" || rc=$?
    cat "$o" 2>/dev/null
    return $rc
  }
  case_ sbatch.smoke.2x2 300 env DISCO_SMOKE_FILTER='SessionTest.*-SessionTest.Hundred*:SessionTest.LargeTransfers*:SessionTest.Parked*' \
    bash -c "$(declare -f sbatch_wait); $(declare -p on1); sbatch_wait \"\$@\"" _ "$out/smoke.out" "$root/jobs/smoke.sbatch"
  case_ sbatch.multinode-cpu.2x2 300 bash -c "$(declare -f sbatch_wait); $(declare -p on1); sbatch_wait \"\$@\"" _ \
    "$out/multinode-cpu.out" "$root/jobs/multinode-cpu.sbatch" "$tests" \
    --gtest_filter='CclTest.AllReduce*:CclTest.Pipeline*:H5Test.Saves*'
  # disco-llm-server as a batch job over both nodes (a task each, jobs/llm-server.sbatch): the
  # official openai client on node1 (where rank 0 listens on the loopback) streams from the port
  # the job wrote down, then scancel ends the job, which must say it ended with exit code 0.
  llm_server_job() {
    local venv=${DISCO_HF_VENV:-$root/.venv-hf}
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
      echo "SKIP: no openai package in $venv (./launch/test installs it)"
      return 0
    fi
    local py=$venv/bin/python dir=$out/shared/llm info=$out/shared/llm.addr o=$out/llm-server.out
    local job model port i rc=0
    rm -rf "$dir" "$info" && mkdir -p "$dir"
    model=$("$py" "$root/tests/server/openai_transcript.py" --make-model "$dir") || return 1
    job=$("${on1[@]}" sbatch --parsable -N 2 --ntasks-per-node=1 -t 10 -o "$o" \
      --export=ALL,DISCO_LLM_SERVER_INFO="$info" "$root/jobs/llm-server.sbatch" --model "$model") ||
      return 1
    # ... while the job runs: one that ended (a rank that died) ends the wait.
    for ((i = 0; i < 900; i++)); do
      [[ -s $info ]] && break
      ((i % 5 != 4)) || [[ -n $("${on1[@]}" squeue -h -j "$job" 2>/dev/null) ]] || break
      sleep 0.2
    done
    [[ -s $info ]] || { cat "$o"; echo "no address from the job"; "${on1[@]}" scancel "$job"; return 1; }
    cat "$o"
    port=$(sed 's|.*:||' "$info")
    "${on1[@]}" "$py" "$root/tests/server/openai_transcript.py" "http://127.0.0.1:$port" || rc=1
    "${on1[@]}" scancel "$job"
    for ((i = 0; i < 300; i++)); do
      [[ -z $("${on1[@]}" squeue -h -j "$job" 2>/dev/null) ]] && break
      sleep 0.2
    done
    echo "--- the job's output after scancel:"
    cat "$o"
    grep -q '^llm-server: job ended with exit code 0' "$o" || { echo "not ended with 0"; rc=1; }
    return $rc
  }
  case_ sbatch.llm-server.2x1 300 bash -c "$(declare -f llm_server_job); $(declare -p on1 out root); llm_server_job"
  # Faults under plain srun (no -K): a rank that dies, and a watchdog timeout, end the job within
  # DISCO_TIMEOUT + 10 s.
  expect srun.rank-killed 40 nonzero "stopped answering liveness pings|signal 9|Killed|killed" \
    "${on1[@]}" srun --mpi=pmix -N 2 --ntasks-per-node=2 -t 5 \
    "$build/tests/disco_fault_program" kill-worker
  expect srun.watchdog 40 nonzero "past DISCO_TIMEOUT=5 s" env DISCO_TIMEOUT=5 "${on1[@]}" \
    srun --mpi=pmix -N 2 --ntasks-per-node=2 -t 5 "$build/tests/disco_fault_program" skip-collective
else
  summary+=("FAIL  slurm-start (see $out/slurm.log)")
  fail=1
  tail -20 "$out/slurm.log"
fi

# ---- A node cut off the network (or, with --all-faults, all its processes killed) under mpirun and
# srun: the job ends within DISCO_TIMEOUT + 10 s, a line names the silent ranks (for a cut), and
# nothing of the job is left on any node once the node is back.
node_fault() {
  local launcher=$1 fault=$2 log=$out/$1.node-$2.job.log t0
  if [[ $launcher == mpirun ]]; then
    setsid "${mpi[@]}" "${h22[@]}" "$tests" --gtest_also_run_disabled_tests \
      --gtest_filter='*Soak*' > "$log" 2>&1 &
  else
    setsid "$vc" exec node1 srun --mpi=pmix -N 2 --ntasks-per-node=2 -t 5 "$tests" \
      --gtest_also_run_disabled_tests --gtest_filter='*Soak*' > "$log" 2>&1 &
  fi
  local job=$!
  # The fault strikes a running job: its ranks are in the soak loop (a launch can take seconds).
  for _ in $(seq 300); do
    grep -q 'RUN.*Soak' "$log" 2>/dev/null && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  grep -q 'RUN.*Soak' "$log" || { cat "$log"; echo "the job did not start"; kill -KILL -- -$job; return 1; }
  sleep 2
  "$vc" fault "$fault" node2
  t0=$SECONDS
  local verdict_after=-1
  while kill -0 $job 2>/dev/null && ((SECONDS - t0 < DISCO_TIMEOUT + 10)); do
    if ((verdict_after < 0)) && grep -q "watchdog: hang culprit" "$log" 2>/dev/null; then
      verdict_after=$((SECONDS - t0))
    fi
    sleep 0.2
  done
  ((verdict_after < 0)) && grep -q "watchdog: hang culprit" "$log" && verdict_after=$((SECONDS - t0))
  local took=$((SECONDS - t0)) ended=1
  if kill -0 $job 2>/dev/null; then
    ended=0
    kill -KILL -- -$job 2>/dev/null
  fi
  wait $job 2>/dev/null
  [[ $fault == down ]] && "$vc" fault up node2
  sleep 3
  local left="" pid
  for pid in $("$vc" pids node2) $("$vc" pids node1); do
    case $(cat "/proc/$pid/comm" 2>/dev/null) in disco_mpi_tests | orted) left+=" $pid" ;; esac
  done
  if [[ -f ${VC_STATE:-/run/disco-vcluster}/slurm/etc/slurm.conf ]] &&
    [[ $launcher == srun || $fault == kill ]]; then
    # node2 back in Slurm (its slurmd restarted after a kill), and the job's step done with on
    # every node (a launch onto a node still completing a step fails).
    "$vc" slurm-start > /dev/null 2>&1 || echo "Slurm did not take node2 back"
    for _ in $(seq 60); do
      [[ -z $("$vc" exec node1 sinfo -h -N -o '%T' | grep -v '^idle$') ]] && break
      sleep 0.5
    done
  fi
  cat "$log"
  echo "--- ended=$ended after ${took} s; hang verdict after ${verdict_after} s; left:${left:- nothing}"
  ((ended)) || { echo "the job outlived DISCO_TIMEOUT + 10 s"; return 1; }
  if [[ $fault == down ]]; then
    grep -q "stopped answering liveness pings\|answered no liveness ping\|answered no state request" "$log" ||
      { echo "no line names the silent ranks"; return 1; }
    # ... and rank 0's hang verdict names them as the culprits, on node2, within DISCO_TIMEOUT +
    # 5 s of the fault.
    ((verdict_after >= 0 && verdict_after <= DISCO_TIMEOUT + 5)) ||
      { echo "no hang verdict within DISCO_TIMEOUT + 5 s"; return 1; }
    grep -Eq "rank 0/[0-9]+[^]]*\] error: watchdog: hang culprits?: ranks? [0-9, ]+ \(node2\) answered no state request" "$log" ||
      { echo "no hang verdict names node2's ranks"; return 1; }
  fi
  [[ -z $left ]] || { echo "processes left after the node came back"; return 1; }
}
faults=(down)
((all_faults)) && faults+=(kill)
for fault in "${faults[@]}"; do
  for launcher in mpirun srun; do
    [[ $launcher == mpirun || -f ${VC_STATE:-/run/disco-vcluster}/slurm/etc/slurm.conf ]] || continue
    case_ "$launcher.node-$fault" 90 bash -c "$(declare -f node_fault); $(declare -p mpi h22 out tests vc); DISCO_TIMEOUT=$DISCO_TIMEOUT node_fault $launcher $fault"
  done
done

echo "==== multi-node stage: $((SECONDS - started)) s (logs in $out)"
printf '%s\n' "${summary[@]}"
exit $fail
