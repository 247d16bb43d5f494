#!/usr/bin/env bash
# disco-demo's default checkpoints are per user: one that another user owns (planted in a shared
# temporary directory) is an error naming it, never loaded; the demo's own is written and reused.
#   run_foreign_checkpoint_test.sh MPIEXEC DISCO_DEMO [mpiexec flags...]
set -u
mpiexec=$1 demo=$2
shift 2
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root to make a directory of another owner"; exit 77; }
tmp=$(mktemp -d /tmp/disco-foreign-ck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
run() { TMPDIR=$tmp timeout 120 "$mpiexec" -n 2 "$@" "$demo" --max-new-tokens 2 2>&1; }
out=$(run "$@") || { echo "$out"; echo "FAIL: the demo's own default checkpoint"; exit 1; }
dir=$(ls -d "$tmp"/disco-demo-llama-u"$(id -u)"-*) || { echo "FAIL: no per-user name"; exit 1; }
echo "written: $dir"
out=$(run "$@") || { echo "$out"; echo "FAIL: reusing the demo's own checkpoint"; exit 1; }
grep -q "^generated:" <<<"$out" || { echo "$out"; exit 1; }
chown -R 65534 "$dir"
out=$(run "$@")
rc=$?
echo "$out" | grep "default checkpoint"
if [[ $rc -eq 0 ]] || ! grep -q "the default checkpoint $dir is owned by uid 65534, not a directory of yours" <<<"$out"; then
  echo "$out" | tail -20
  echo "FAIL: a checkpoint of another owner was not refused (exit $rc)"
  exit 1
fi
rm -rf "$dir" && ln -s /etc "$dir"
out=$(run "$@")
rc=$?
[[ $rc -ne 0 ]] && grep -q "is not a directory, not a directory of yours" <<<"$out" ||
  { echo "$out" | tail -20; echo "FAIL: a link was not refused"; exit 1; }
echo "PASS: another owner's default checkpoint and a link in its place are refused"
