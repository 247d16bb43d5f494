#!/usr/bin/env bash
# The key file a served job generates goes with the job however it ends, and is written where
# --key-file says; a stale key file is named when the server refuses it.
#   run_keyfile_test.sh DISCO_SERVE DISCO_REMOTE FAULT_PROGRAM REMOTE_CALL -- MPIEXEC ARGS...
# Cases (each with HOME a fresh directory):
#   sigterm, sigint  disco-serve without a key; SIGTERM (SIGINT) to mpirun, as Ctrl-C, scancel and
#                    a time limit do: ~/.disco/serve-PORT.key is gone once the job has ended
#   first_rank       the launcher SIGKILLs rank 0 before its handler ran, as MPICH's hydra does once
#                    the first rank exits on its SIGTERM: with rank 0 and the launcher stopped
#                    (SIGSTOP), rank 1 alone gets SIGTERM; once it has exited, the key file must be
#                    gone already; then rank 0 is SIGKILLed and the launcher resumed
#   sigkill_all      every process of the job (the launcher and the ranks) SIGKILLed at once: no
#                    handler runs; the watcher process (a session of its own) removes the file
#   fatal            a client makes worker 0 call std::terminate (disco::Main's fatal-error path)
#   watchdog         a client's call runs past DISCO_TIMEOUT=3 (the watchdog ends the job)
#   relative         disco-serve --key-file mykey writes ./mykey (not a directory), which clients
#                    read with DISCO_SERVE_KEY_FILE=mykey, and which goes when the job ends
#   stale            a key file with another key: the client's refusal names the file
set -u
serve=$1 remote=$2 fault=$3 call=$4
shift 4
[[ ${1:-} == -- ]] && shift
mpi=("$@")
root=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  rm -rf "$root"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL [$case]: $*"; fail=1; }
unset DISCO_SERVE_KEY DISCO_SERVE_KEY_FILE DISCO_TIMEOUT

# start NAME CMD...: runs CMD (a served job writing its port to $dir/port) in a process group of
# its own in $dir, with HOME=$dir; sets job, port and key_file.
start() {
  dir=$root/$1
  shift
  mkdir -p "$dir"
  (cd "$dir" && HOME=$dir DISCO_TEST_PORT_FILE=$dir/port exec setsid "$@" >"$dir/log" 2>&1) &
  job=$!
  pids+=("$job")
  port=""
  for _ in $(seq 600); do
    [[ -s $dir/port ]] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  [[ -s $dir/port ]] || { cat "$dir/log"; bad "the served job did not start"; return 1; }
  port=$(cat "$dir/port")
  key_file=$dir/.disco/serve-$port.key
}
# ended SECONDS: waits for the job to end; false when it is still running.
ended() {
  for _ in $(seq $(($1 * 10))); do
    kill -0 "$job" 2>/dev/null || { wait "$job"; code=$?; return 0; }
    sleep 0.1
  done
  return 1
}
check_gone() {
  cat "$dir/log"
  echo "--- [$case] job exit code ${code:-none}"
  [[ ! -e $key_file ]] || bad "the key file $key_file outlived the job"
}

for case in sigterm sigint; do
  start "$case" "${mpi[@]}" "$serve" --port-file "$root/$case/port" || continue
  [[ -f $key_file ]] || bad "no key file $key_file"
  sig=TERM
  [[ $case == sigint ]] && sig=INT
  kill -$sig "$job"
  ended 30 || { bad "the job did not end within 30 s of SIG$sig"; continue; }
  check_gone
done

# job_pids: every process of the current case's job (the launcher and the ranks, which all have
# its port file in their environment); rank_pid R: the pid of rank R (Open MPI, hydra and PMIx
# launchers each name the rank their way).
job_pids() {
  grep -lsxzF "DISCO_TEST_PORT_FILE=$dir/port" /proc/[0-9]*/environ | cut -d/ -f3
  true
}
rank_pid() {
  local pid
  for pid in $(job_pids); do
    grep -qsxzE "(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=$1" "/proc/$pid/environ" && echo "$pid"
  done
  true
}
# exited PID: true once PID is gone or a zombie (its parent, the launcher, is stopped).
exited() {
  local state
  state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ -z $state || $state == Z || $state == X ]]
}

case=first_rank
if start "$case" "${mpi[@]}" "$serve" --port-file "$root/$case/port"; then
  [[ -f $key_file ]] || bad "no key file $key_file"
  rank0=$(rank_pid 0) rank1=$(rank_pid 1)
  if [[ -z $rank0 || -z $rank1 ]]; then
    bad "cannot find the ranks' pids (rank 0: '$rank0', rank 1: '$rank1')"
  else
    others=()
    for p in $(job_pids); do [[ $p != "$rank1" ]] && others+=("$p"); done
    kill -STOP "${others[@]}"
    kill -TERM "$rank1"
    for _ in $(seq 300); do exited "$rank1" && break; sleep 0.1; done
    if ! exited "$rank1"; then
      bad "rank 1 did not exit within 30 s of SIGTERM"
    elif [[ -e $key_file ]]; then
      bad "the key file $key_file outlived rank 1, the first rank to exit (rank 0 ran no handler)"
    fi
    kill -KILL "$rank0"
    kill -CONT "${others[@]}" 2>/dev/null
    ended 30 || bad "the job did not end within 30 s of rank 0's SIGKILL"
    check_gone
  fi
fi

case=sigkill_all
if start "$case" "${mpi[@]}" "$serve" --port-file "$root/$case/port"; then
  [[ -f $key_file ]] || bad "no key file $key_file"
  # The job's processes share its session (setsid above); the watcher left it.
  sid=$(ps -o sid= -p "$job" | tr -d ' ')
  victims=()
  for p in $(job_pids); do
    [[ $(ps -o sid= -p "$p" | tr -d ' ') == "$sid" ]] && victims+=("$p")
  done
  kill -KILL "${victims[@]}"
  ended 30 || bad "the job did not end within 30 s of SIGKILL"
  # The watcher removes it as soon as it sees rank 0 gone: 30 s against a hang only.
  for _ in $(seq 300); do [[ -e $key_file ]] || break; sleep 0.1; done
  check_gone
fi

case=fatal
if start "$case" "${mpi[@]}" "$fault" serve; then
  [[ -f $key_file ]] || bad "no key file $key_file"
  HOME=$dir timeout 60 "$call" "127.0.0.1:$port" fault.terminate_on_0
  if ended 30; then
    check_gone
    [[ $code -ne 0 ]] || bad "the job ended with exit 0"
    grep -q "fatal: std::terminate called" "$dir/log" || bad "no fatal error line"
  else
    bad "the job did not end"
  fi
fi

case=watchdog
if DISCO_TIMEOUT=3 start "$case" "${mpi[@]}" "$fault" serve; then
  [[ -f $key_file ]] || bad "no key file $key_file"
  HOME=$dir timeout 60 "$call" "127.0.0.1:$port" fault.sleep_ms 60000
  if ended 30; then
    check_gone
    grep -q "past DISCO_TIMEOUT=3 s" "$dir/log" || bad "the watchdog did not end the job"
  else
    bad "the job did not end"
  fi
fi

case=relative
if start "$case" "${mpi[@]}" "$serve" --key-file mykey --port-file "$root/$case/port"; then
  key_file=$dir/mykey
  [[ -f $key_file && ! -d $key_file ]] || bad "--key-file mykey did not write the file ./mykey"
  [[ $(stat -c %a "$key_file" 2>/dev/null) == 600 ]] || bad "./mykey is not mode 600"
  (cd "$dir" && HOME=$dir DISCO_SERVE_KEY_FILE=mykey timeout 60 "$remote" "127.0.0.1:$port" info) ||
    bad "a client could not attach with DISCO_SERVE_KEY_FILE=mykey"
  (cd "$dir" && HOME=$dir DISCO_SERVE_KEY_FILE=mykey timeout 60 "$remote" "127.0.0.1:$port" shutdown 0)
  if ended 30; then
    check_gone
    [[ $code -eq 0 ]] || bad "the job ended with $code"
  else
    bad "the job did not end"
  fi
fi

case=stale
if start "$case" "${mpi[@]}" "$serve" --port-file "$root/$case/port"; then
  printf '%s\n' 0000000000000000000000000000000000000000000000000000000000000000 >"$dir/stale.key"
  chmod 600 "$dir/stale.key"
  out=$(HOME=$dir DISCO_SERVE_KEY_FILE=$dir/stale.key timeout 60 "$remote" "127.0.0.1:$port" info 2>&1)
  echo "$out"
  grep -q "wrong key" <<<"$out" || bad "a wrong key file was not refused"
  grep -q "key file '$dir/stale.key'" <<<"$out" || bad "the refusal does not name the key file"
  HOME=$dir timeout 60 "$remote" "127.0.0.1:$port" shutdown 0
  ended 30 || bad "the job did not end"
fi

((fail)) && exit 1
echo PASS
