#!/usr/bin/env bash
# disco-demo --mlp runs disco-demo-mlp, the program next to it, with every other argument (before
# --mlp or after); where that program is missing, disco-demo stops at once with exit code 2 and one
# line that names the program it looked for. Both run alone (no MPI: --help and a bad option end
# before MPI starts), from copies in a directory of their own.
#   run_exec_test.sh DISCO_DEMO DISCO_DEMO_MLP
set -u
demo=$1 mlp=$2
dir=$(mktemp -d /tmp/disco-demo-exec-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; echo "$out" | head -n 20 | sed 's/^/    /'; fail=1; }
cp "$demo" "$dir/disco-demo"

# Alone: the one line, exit code 2.
rc=0
out=$(LC_ALL=C "$dir/disco-demo" --mlp --steps 2 2>&1) || rc=$?
want="disco-demo: --mlp runs the MLP demo, $dir/disco-demo-mlp, which cannot be started: "
want+="No such file or directory"
if [[ $rc -ne 2 || $(wc -l <<<"$out") -ne 1 || $out != "$want" ]]; then
  bad "disco-demo --mlp without disco-demo-mlp: exit code $rc (expected 2), not the one line '$want'"
else
  echo "ok: without disco-demo-mlp -> $out"
fi

# Beside it: disco-demo-mlp's help, and its verdict on an argument given before --mlp.
cp "$mlp" "$dir/disco-demo-mlp"
rc=0
out=$("$dir/disco-demo" --mlp --help 2>&1) || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q "^Usage: disco-demo --mlp " <<<"$out" ||
   ! grep -q -- "^  --tolerance " <<<"$out"; then
  bad "disco-demo --mlp --help: exit code $rc (expected 0) and disco-demo-mlp's usage and options"
else
  echo "ok: disco-demo --mlp --help -> $(grep '^Usage: ' <<<"$out")"
fi
rc=0
out=$("$dir/disco-demo" --steps 0 --mlp 2>&1) || rc=$?
want="--steps: '0' is not an integer in 1..1000000"
if [[ $rc -ne 2 ]] || ! grep -q "^disco-demo --mlp: .*$want" <<<"$out"; then
  bad "disco-demo --steps 0 --mlp: exit code $rc (expected 2) and disco-demo-mlp's '$want'"
else
  echo "ok: disco-demo --steps 0 --mlp -> $out"
fi
# --mlp takes no value (an outside round: --mlp=true ran the decoder), and "--" ends the options
# (-- --mlp ran the MLP demo).
rc=0
out=$("$dir/disco-demo" --mlp=true 2>&1) || rc=$?
if [[ $rc -ne 2 || $out != "disco-demo: --mlp takes no value (got '--mlp=true')" ]]; then
  bad "disco-demo --mlp=true: exit code $rc (expected 2), output: $out"
else
  echo "ok: disco-demo --mlp=true -> $out"
fi
rc=0
out=$("$dir/disco-demo" -- --mlp 2>&1) || rc=$?
if [[ $rc -eq 0 ]] || grep -q "^Usage: disco-demo --mlp" <<<"$out"; then
  bad "disco-demo -- --mlp: exit code $rc; the MLP demo must not run: $(head -2 <<<"$out")"
else
  echo "ok: disco-demo -- --mlp -> $(head -1 <<<"$out")"
fi
exit $fail
