#!/usr/bin/env bash
# Open MPI's remote-launch agent on the virtual cluster (vcluster.sh mpirun sets it), in place of
# ssh: `rsh-agent.sh [ssh options] HOST COMMAND...` runs COMMAND with /bin/sh -c on HOST's node,
# as sshd would: in the home directory, with a fresh login environment (HOME, USER, SHELL, PATH,
# LANG), so that a variable reaches remote ranks only if the launcher forwards it (mpirun -x), as
# on a real cluster.
set -euo pipefail
VC_STATE=${VC_STATE:-/run/disco-vcluster}
while [ $# -gt 0 ]; do
  case "$1" in
    -[lpioFJLRDEWbcemSwO]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "rsh-agent.sh: usage: rsh-agent.sh HOST COMMAND..." >&2; exit 2; }
host=${1%%.*}
shift
line=$(awk -v h="$host" '$1 == h || $2 == h' "$VC_STATE/nodes")
[ -n "$line" ] || { echo "rsh-agent.sh: '$host' is not a node of the virtual cluster" >&2; exit 2; }
read -r _ _ _ pid _ <<<"$line"
home=$(getent passwd "$(id -un)" | cut -d: -f6)
exec nsenter -t "$pid" -n -u -i -m --wd="${home:-/}" -- env -i HOME="${home:-/}" \
  USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh LANG="${LANG:-C.UTF-8}" \
  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" /bin/sh -c "$*"
