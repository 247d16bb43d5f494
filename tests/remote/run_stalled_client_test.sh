#!/usr/bin/env bash
# A remote client that stalls inside a request (the hang matrix's "stuck remote client"): it holds
# the whole served job, since a served job takes one client's requests at a time. With
# DISCO_TIMEOUT=3 the server must drop it, naming it and why, at most DISCO_TIMEOUT + 5 s after it
# stalled; the job goes on and serves the next client.
#   run_stalled_client_test.sh DISCO_SERVE DISCO_REMOTE DISCO_REMOTE_CALL -- MPIEXEC ARGS...
set -u
serve=$1 remote=$2 call=$3
shift 3
[[ ${1:-} == -- ]] && shift
dir=$(mktemp -d)
trap 'kill -KILL -- -$spid 2>/dev/null; kill -KILL $cpid 2>/dev/null; rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
export DISCO_TIMEOUT=3 DISCO_SERVE_KEY=stalled-client-test-key-0123456789
setsid "$@" "$serve" --port-file "$dir/port" >"$dir/server.log" 2>&1 &
spid=$!
for _ in $(seq 600); do [[ -s $dir/port ]] && break; sleep 0.1; done
[[ -s $dir/port ]] || { cat "$dir/server.log"; echo "FAIL: the server did not start"; exit 1; }
port=$(cat "$dir/port")
"$call" "127.0.0.1:$port" --stall >"$dir/client.log" 2>&1 &
cpid=$!
for _ in $(seq 200); do grep -q "hang begins" "$dir/client.log" && break; sleep 0.05; done
grep -q "hang begins" "$dir/client.log" || { cat "$dir/client.log"; bad "the client did not stall"; }
begun=${EPOCHREALTIME/./}
said=''
while (( (${EPOCHREALTIME/./} - begun) / 1000 < 15000 )); do
  if grep -Eq "disco-serve: client 127\.0\.0\.1:[0-9]+ dropped: .*timed out after 3000 ms without progress .*waiting for a packet body" \
    "$dir/server.log"; then
    said=${EPOCHREALTIME/./}
    break
  fi
  sleep 0.05
done
if [[ -z $said ]]; then
  bad "no line dropped the stalled client within 15 s"
else
  after_ms=$(( (said - begun) / 1000 ))
  echo "--- the stalled client was dropped $(printf '%d.%03d' $((after_ms / 1000)) $((after_ms % 1000))) s after it stalled (limit 8 s)"
  (( after_ms <= 8000 )) || bad "later than DISCO_TIMEOUT + 5 s"
fi
# The job goes on: the next client is served, and ends it.
"$remote" "127.0.0.1:$port" info >/dev/null || bad "the next client was not served"
"$remote" "127.0.0.1:$port" shutdown 0 || bad "disco-remote could not end the job"
for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$spid" 2>/dev/null && bad "the job did not end"
cat "$dir/server.log"
((fail)) && exit 1
echo "PASS"
