#!/usr/bin/env bash
# disco-demo's default checkpoint lives in this user's private directory ($TMPDIR/disco-u<uid>,
# 0700), where no other user can create names:
#   - a private directory planted by another user, a link in its place, or one others can write
#     into is refused naming it; the demo's own checkpoint is written there and reused; one of
#     another owner there (root's chown) is refused, never loaded;
#   - another user racing the write (T1: renaming a checkpoint of their own to the name while the
#     demo writes, as a shared /tmp allowed) cannot: the demo loads its own weights;
#   - no partial directory outlives the write however it ends (T10): SIGTERM to the launcher, a
#     write error (a full file system), and SIGKILL (the next run removes what the killed one left).
#   run_foreign_checkpoint_test.sh PYTHON MPIEXEC DISCO_DEMO [mpiexec flags...]
set -u
py=$1 mpiexec=$2 demo=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root to act as another user"; exit 77; }
command -v setpriv >/dev/null || { echo "skipped: no setpriv"; exit 77; }
tmp=$(mktemp -d /tmp/disco-foreign-ck.XXXXXX)
trap 'pkill -KILL -f "$tmp/attacker.py" 2>/dev/null; rm -rf "$tmp"' EXIT
chmod 1777 "$tmp"  # a shared /tmp
priv=$tmp/disco-u$(id -u)
fail=0
bad() { echo "FAIL: $*"; fail=1; }
run() { TMPDIR=$tmp timeout 300 "$mpiexec" -n 2 "$@" "$demo" --max-new-tokens 2 --warmup 0 2>&1; }
convert() { TMPDIR=$tmp timeout 300 "$mpiexec" -n 2 "${flags[@]}" "$demo" --warmup 0 --convert "$1" 2>&1; }
refused() {  # refused NEEDLE: the demo fails, naming it
  local out rc=0
  out=$(run "${flags[@]}") || rc=$?
  if ((rc == 0)) || ! grep -qF -- "$1" <<<"$out"; then
    echo "$out" | tail -5; bad "not refused (exit $rc): $1"
  else
    echo "ok: refused: $1"
  fi
}
flags=("$@")

# The private directory itself.
setpriv --reuid 65534 --regid 65534 --clear-groups mkdir "$priv"
refused "the private directory $priv belongs to another user"
rmdir "$priv" && ln -s /etc "$priv"
refused "the private directory $priv is a symbolic link"
rm "$priv" && mkdir -m 0777 "$priv"
refused "the private directory $priv can be written by other users"
rmdir "$priv"

# A save through another user's link in the shared directory (fs.protected_symlinks' rule): the
# link is refused, the file it aims at untouched; a dangling one creates nothing. One's own link is
# followed (written through, as `cp` does).
touch "$tmp/victim" && chmod 0600 "$tmp/victim"
setpriv --reuid 65534 --regid 65534 --clear-groups ln -s "$tmp/victim" "$tmp/out.h5"
setpriv --reuid 65534 --regid 65534 --clear-groups ln -s "$tmp/made-by-link" "$tmp/dangle.h5"
for link in out.h5 dangle.h5; do
  out=$(convert "$tmp/$link") && rc=0 || rc=$?
  if ((rc == 0)) || ! grep -qF "'$tmp/$link' is a symbolic link of uid 65534 in the shared directory" <<<"$out"; then
    echo "$out" | tail -3; bad "a save followed another user's link $link (exit $rc)"
  else
    echo "ok: refused: a save through another user's link ($link)"
  fi
done
[[ -s $tmp/victim || -e $tmp/made-by-link ]] && bad "the link's target was written"
rm -f "$tmp/out.h5" "$tmp/dangle.h5" "$tmp/victim"
ln -s "$tmp/mine-target.h5" "$tmp/mine.h5"
out=$(convert "$tmp/mine.h5") && [[ -L $tmp/mine.h5 && -s $tmp/mine-target.h5 ]] &&
  echo "ok: a save through one's own link writes its target" || { echo "$out" | tail -3; bad "own link"; }
rm -rf "$tmp/mine.h5" "$tmp/mine-target.h5" "$priv"

# The demo's own checkpoint: written, reused; another owner's in its place refused.
out=$(run "${flags[@]}") || { echo "$out"; bad "the demo's own default checkpoint"; }
[[ $(stat -c %a "$priv") == 700 ]] || bad "$priv has mode $(stat -c %a "$priv"), not 700"
dir=$(ls -d "$priv"/llama-*) || bad "no checkpoint in $priv"
echo "written: $dir"
out=$(run "${flags[@]}") || { echo "$out"; bad "reusing the demo's own checkpoint"; }
grep -q "^generated:" <<<"$out" || { echo "$out"; bad "no generated line"; }
chown -R 65534 "$dir"
refused "the default checkpoint $dir is owned by uid 65534, not a directory of yours"
rm -rf "$dir"

# T1: another user swaps a checkpoint of their own in while the demo writes (none is there yet,
# wherever a demo keeps it).
rm -rf "$priv"/llama-* "$tmp"/disco-demo-llama-*
# T1: another user swaps a checkpoint of their own in while the demo writes. They watch every
# directory they can list for a partial checkpoint and rename theirs to its final name.
"$py" "$here/tiny_checkpoint.py" "$tmp/theirs" --hidden 64 >/dev/null || bad "tiny_checkpoint.py"
chown -R 65534 "$tmp/theirs"
cat >"$tmp/attacker.py" <<'PYEOF'
import os, sys, time
tmp, theirs = sys.argv[1], sys.argv[2]
end = time.time() + 120
while time.time() < end:
    for d in (tmp, os.path.join(tmp, "disco-u0")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if ".partial." in n:
                try:
                    os.rename(theirs, os.path.join(d, n.split(".partial.")[0]))
                    print("attacker: planted", os.path.join(d, n.split(".partial.")[0]), flush=True)
                    sys.exit(0)
                except OSError as e:
                    print("attacker:", e, flush=True)
                    sys.exit(0)
    time.sleep(0.0005)
PYEOF
setpriv --reuid 65534 --regid 65534 --clear-groups "$py" "$tmp/attacker.py" "$tmp" "$tmp/theirs" &
attacker=$!
out=$(run "${flags[@]}")
rc=$?
kill "$attacker" 2>/dev/null; wait "$attacker" 2>/dev/null
if ((rc != 0)) || ! grep -q "llama, 2 workers, hidden 256," <<<"$out"; then
  echo "$out" | grep -E "loaded|error|checkpoint" | head -5; bad "T1: the demo did not load its own weights (exit $rc)"
else
  echo "ok: T1: the demo loaded its own weights while another user raced the write"
fi
rm -rf "$priv"/llama-*

# T10: no partial directory outlives the write. A larger checkpoint, so the write takes a while.
big=(--hidden 512 --layers 8 --vocab 16384 --ffn 1536 --seed 5)
partials() { ls -d "$tmp"/disco-u*/*.partial.* "$tmp"/*.partial.* 2>/dev/null; }
wait_partial() {  # wait_partial: until a partial directory appears (the guard: 300 s)
  for _ in $(seq 3000); do [[ -n $(partials) ]] && return 0; sleep 0.1; done
  return 1
}
# The signal goes to the launcher alone, as scancel, a time limit or Ctrl-C send it (the ranks
# are in process groups of their own); the launcher passes it on.
for sig in TERM INT; do
  (TMPDIR=$tmp exec setsid "$mpiexec" -n 2 "${flags[@]}" "$demo" "${big[@]}" \
    --max-new-tokens 2 >"$tmp/sig.log" 2>&1) &
  job=$!
  if wait_partial; then
    kill -"$sig" "$job"
    wait "$job"
    left=$(partials)
    [[ -z $left ]] && echo "ok: T10: SIG$sig during the write left no partial directory" ||
      bad "T10: SIG$sig left $left"
  else
    bad "T10: no partial directory appeared"; kill -KILL "$job"; pkill -KILL -f -- "$demo ${big[*]}"; wait "$job"
  fi
  rm -rf "$priv"/llama-*
done
# A write error: a file system too small for the checkpoint.
if unshare --mount true 2>/dev/null; then
  # The private directory on a small tmpfs (the launcher's own files stay in $TMPDIR).
  mkdir -p -m 0700 "$priv"
  out=$(unshare --mount bash -c 'mount -t tmpfs -o size=4m,mode=0700 tmpfs "$1" &&
    TMPDIR=$2 timeout 300 "${@:3}" 2>&1; echo "rc=$?"; echo "left: $(ls -A "$1")"' _ "$priv" "$tmp" \
    "$mpiexec" -n 2 "${flags[@]}" "$demo" "${big[@]}" --max-new-tokens 2)
  if grep -q "rc=0" <<<"$out" || ! grep -q "^left: $" <<<"$out" || ! grep -q "No space left" <<<"$out"; then
    echo "$out" | grep -v "^ *$" | tail -12; bad "T10: a full file system"
  else
    echo "ok: T10: a write that failed (No space left on device) left no partial directory"
  fi
else
  echo "skipped: a full file system (no mount namespace)"
fi
# SIGKILL: nothing runs in the process; its watcher (a process of its own) removes the partial
# directory, and where that missed it, the next run does (a minute old at least: a run that has
# just made its directory may not hold its lock yet).
(TMPDIR=$tmp exec setsid "$mpiexec" -n 2 "${flags[@]}" "$demo" "${big[@]}" \
  --max-new-tokens 2 >"$tmp/kill.log" 2>&1) &
job=$!
if wait_partial; then
  # The ranks, not their watchers (children of a rank with the same command line), as the kernel's
  # OOM killer or a launcher's SIGKILL picks them.
  ranks=$(pgrep -f -- "$demo ${big[*]}")
  for p in $ranks; do
    grep -qx "$(ps -o ppid= -p "$p" | tr -d ' ')" <<<"$ranks" || kill -KILL "$p"
  done
  wait "$job"
  for _ in $(seq 300); do [[ -z $(partials) ]] && break; sleep 0.1; done  # the watcher's work
  [[ -z $(partials) ]] && echo "ok: T10: the watcher removed the partial directory SIGKILL left" ||
    bad "T10: SIGKILL left $(partials)"
  # What a watcher cannot remove (it was killed too, as a cgroup's kill does): a stale partial
  # directory, unlocked, two minutes old.
  left=$(mktemp -d "$priv/llama-h512-l8-a8-k4-d64-f1536-v16384-s5.partial.XXXXXX")
  touch "$left/config.json" && touch -d '2 minutes ago' "$left"
  out=$(run "${flags[@]}") || { echo "$out" | tail -5; bad "the run after a SIGKILL"; }
  [[ -z $(partials) ]] && echo "ok: T10: the next run removed a stale partial directory" ||
    bad "T10: $(partials) left after the next run"
else
  bad "T10: no partial directory appeared"; kill -KILL "$job"; pkill -KILL -f -- "$demo ${big[*]}"; wait "$job"
fi
# The watcher killed or stopped while the demo writes: the demo goes on (no SIGPIPE at Commit, no
# wait for a stopped watcher) and its checkpoint is complete.
for sig in KILL STOP; do
  rm -rf "$priv"/llama-*
  (TMPDIR=$tmp exec setsid "$mpiexec" -n 2 "${flags[@]}" "$demo" "${big[@]}" \
    --max-new-tokens 2 >"$tmp/watcher.log" 2>&1) &
  job=$!
  watcher=""
  for _ in $(seq 3000); do  # a disco-demo process that leads its own session (not mpiexec)
    watcher=$(ps -eo pid=,sid=,args= | awk -v d="$demo" '$1 == $2 && $3 == d { print $1 }')
    [[ -n $watcher ]] && break
    sleep 0.1
  done
  [[ -n $watcher ]] && kill -"$sig" $watcher
  rc=0; wait "$job" || rc=$?
  [[ $sig == STOP && -n $watcher ]] && kill -KILL $watcher 2>/dev/null
  if [[ -z $watcher ]]; then
    echo "note: the write ended before its watcher was seen (SIG$sig)"
  elif ((rc == 0)) && [[ -f $(ls -d "$priv"/llama-h512-*-s5 2>/dev/null)/model.safetensors ]]; then
    echo "ok: the watcher's SIG$sig: the demo wrote its checkpoint and exited 0"
  else
    tail -5 "$tmp/watcher.log"; bad "the watcher's SIG$sig: exit $rc"
  fi
done
# Nothing but a partial directory of the demo's naming is removed as stale: a directory of the
# user's with ".partial." in its name, old and unlocked, keeps its files.
mkdir -p "$priv/notes.partial.keep" && touch "$priv/notes.partial.keep/config.json"
touch -d '2 minutes ago' "$priv/notes.partial.keep"
out=$(run "${flags[@]}") || { echo "$out" | tail -5; bad "the run beside notes.partial.keep"; }
[[ -f $priv/notes.partial.keep/config.json ]] && echo "ok: notes.partial.keep kept its files" ||
  bad "the stale-partial cleanup removed notes.partial.keep/config.json"
((fail == 0)) && echo "PASS: the default checkpoint is private, and no partial one is left"
exit $fail
