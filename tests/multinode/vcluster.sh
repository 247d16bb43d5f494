#!/usr/bin/env bash
# vcluster.sh: a virtual cluster of N nodes on one machine, for disco's multi-node tests (root).
#
#   tests/multinode/vcluster.sh start [N]        nodes node1..nodeN (default 2), 10.77.0.<i>
#   tests/multinode/vcluster.sh exec NODE CMD...  CMD on a node, in this directory and environment
#   tests/multinode/vcluster.sh mpirun ARGS...    Open MPI's mpirun on node1, ranks across nodes
#   tests/multinode/vcluster.sh slurm-start       slurmctld on node1, a slurmd on every node
#   tests/multinode/vcluster.sh fault kill|down|up NODE
#   tests/multinode/vcluster.sh stop              everything above goes, Slurm included
#
# A node is a network namespace (lo, and eth0 on a bridge of the root namespace that has no
# address: nodes reach each other and nothing else) and a holder process (`sleep infinity`) with
# UTS, IPC and mount namespaces of its own: its own host name, /dev/shm and /tmp (so nothing in
# them is shared between nodes, as on a real cluster), its own /sys/class/net, and the cluster's
# hosts file. Running on a node is nsenter into the holder's namespaces. Open MPI reaches other
# nodes through rsh-agent.sh (an ssh stand-in that gives remote daemons a login environment: a
# variable reaches them only with mpirun -x). Slurm's daemons run inside the nodes, each with its
# node's name and address; its configuration is bind-mounted over /etc/slurm inside the nodes
# only. Nothing of the machine's /etc is written (but a munge key, when there is none).
# State: $VC_STATE (default /run/disco-vcluster). Settings: VC_SUBNET (10.77.0), VC_SLOTS (2 per
# node), VC_SHM_SIZE (1g), VC_TMP_SIZE (2g), VC_SHARED_TMP (a:b: directories under /tmp that every
# node still sees, e.g. a checkout in /tmp), VC_SLURMD_TIMEOUT (20 s: how soon Slurm notices a
# dead node).
set -uo pipefail

VC_STATE=${VC_STATE:-/run/disco-vcluster}
VC_SUBNET=${VC_SUBNET:-10.77.0}
VC_BRIDGE=${VC_BRIDGE:-dvcbr0}
VC_SLOTS=${VC_SLOTS:-2}
VC_SHM_SIZE=${VC_SHM_SIZE:-1g}
VC_TMP_SIZE=${VC_TMP_SIZE:-2g}
VC_SLURMD_TIMEOUT=${VC_SLURMD_TIMEOUT:-20}
VC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$PATH:/usr/sbin:/sbin"

vc_die() { echo "vcluster: $*" >&2; exit 1; }
vc_log() { echo "vcluster: $*" >&2; }
vc_starttime() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }
vc_alive() {  # vc_alive PID STARTTIME: that very process still runs (not a zombie)
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
  [ "$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)" != Z ] || return 1
  [ "$(vc_starttime "$1")" = "$2" ]
}
vc_nodes() { [ -f "$VC_STATE/nodes" ] && awk '{ print $1 }' "$VC_STATE/nodes"; }
vc_line() { [ -f "$VC_STATE/nodes" ] && awk -v n="$1" '$1 == n' "$VC_STATE/nodes"; }
vc_holder() {  # the node's holder pid, if it is alive
  local line; line=$(vc_line "$1") || return 1
  [ -n "$line" ] || return 1
  set -- $line
  vc_alive "$4" "$5" && echo "$4"
}
vc_resolve() {  # node1, node1.x or 10.77.0.1 -> node1
  [ -f "$VC_STATE/nodes" ] || return 1
  awk -v h="$1" -v s="${1%%.*}" '$1 == h || $2 == h || $1 == s { print $1; f = 1; exit } END { exit !f }' \
    "$VC_STATE/nodes"
}
vc_enter() {  # vc_enter NODE CMD...: exec CMD on the node, here, with this environment
  local node=$1 pid; shift
  pid=$(vc_holder "$node") || vc_die "node '$node' is not up (vcluster.sh start)"
  nsenter -t "$pid" -m -- test -d "$PWD" ||
    vc_die "$PWD does not exist on $node (each node has its own /tmp)"
  exec nsenter -t "$pid" -n -u -i -m --wd="$PWD" -- "$@"
}
vc_node_pids() { ip netns pids "$1" 2>/dev/null || true; }
vc_root() { [ "$(id -u)" = 0 ] || vc_die "needs root (network namespaces, mounts)"; }

# term_then_kill PID...: SIGTERM, up to 5 s, SIGKILL.
term_then_kill() {
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  for _ in $(seq 50); do
    local alive=0 pid
    for pid in "$@"; do
      [ -e "/proc/$pid" ] && [ "$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null)" != Z ] && alive=1
    done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null
  sleep 0.2
}

# ---- start ---------------------------------------------------------------------------------
# The holder: in the node's network namespace, with UTS, IPC and mount namespaces of its own
# (slave propagation: mounts made later in the root still show inside).
HOLDER='set -e
cd /
hostname "$VC_NODE"
mount -t tmpfs -o "size=$VC_SHM,mode=1777" vc-shm /dev/shm
cg=0
if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup "$VC_STATE/host-cgroup"; cg=1; fi
mount -t sysfs vc-sysfs /sys
if [ $cg = 1 ]; then mount --rbind "$VC_STATE/host-cgroup" /sys/fs/cgroup; umount -l "$VC_STATE/host-cgroup"; fi
mount --bind "$VC_STATE/hosts" /etc/hosts
[ ! -e /etc/resolv.conf ] || mount --bind "$VC_STATE/resolv.conf" /etc/resolv.conf
# A private /tmp; the directories in VC_SHARED_TMP (a:b, under /tmp) stay shared.
mount --bind /tmp "$VC_STATE/host-tmp"
mount -t tmpfs -o "size=$VC_TMP,mode=1777" vc-tmp /tmp
IFS=:
for p in $VC_SHARED; do
  [ -n "$p" ] || continue
  mkdir -p "$p"
  mount --bind "$VC_STATE/host-tmp/${p#/tmp/}" "$p"
done
umount -l "$VC_STATE/host-tmp"
exec sleep infinity'

cmd_start() {
  local n=${1:-2} i node ip veth pid p shared
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || vc_die "start N: 1 <= N <= 16"
  vc_root
  for tool in ip nsenter unshare setsid; do command -v $tool >/dev/null || vc_die "$tool not found"; done
  if [ -f "$VC_STATE/nodes" ]; then
    local healthy=1
    [ "$(vc_nodes | wc -l)" = "$n" ] || healthy=0
    for node in $(vc_nodes); do
      pid=$(vc_holder "$node") || { healthy=0; continue; }
      # The shared directories must still be the ones here: a checkout removed and made again
      # (a run interrupted, then a fresh clone) would leave the nodes seeing the old one.
      IFS=: read -r -a shared <<<"${VC_SHARED_TMP:-}"
      for p in "${shared[@]}"; do
        [ -z "$p" ] || [ "$(nsenter -t "$pid" -m -- stat -c %d:%i "$p" 2>/dev/null)" = \
          "$(stat -c %d:%i "$p" 2>/dev/null)" ] || healthy=0
      done
    done
    if [ $healthy = 1 ]; then vc_log "$n nodes already up"; return 0; fi
    cmd_stop
  fi
  ! ip link show "$VC_BRIDGE" >/dev/null 2>&1 || vc_die "a link $VC_BRIDGE exists that is not ours"
  install -d -m 0755 "$VC_STATE" "$VC_STATE/host-cgroup" "$VC_STATE/host-tmp"
  local p
  IFS=: read -r -a shared <<<"${VC_SHARED_TMP:-}"
  for p in "${shared[@]}"; do
    [ -z "$p" ] || { [[ $p == /tmp/?* && $p != *..* && -d $p ]] || vc_die "VC_SHARED_TMP: '$p' is not a directory under /tmp"; }
  done
  : > "$VC_STATE/nodes"
  { echo "127.0.0.1 localhost"; for i in $(seq "$n"); do echo "$VC_SUBNET.$i node$i"; done; } \
    > "$VC_STATE/hosts"
  echo "options timeout:1 attempts:1" > "$VC_STATE/resolv.conf"
  for i in $(seq "$n"); do echo "node$i slots=$VC_SLOTS"; done > "$VC_STATE/hostfile"
  [ -d /run/netns ] && echo 1 > "$VC_STATE/had-netns" || echo 0 > "$VC_STATE/had-netns"
  ip link add "$VC_BRIDGE" type bridge || vc_die "cannot make the bridge"
  ip link set "$VC_BRIDGE" type bridge stp_state 0 forward_delay 0 2>/dev/null
  [ ! -d "/proc/sys/net/ipv6/conf/$VC_BRIDGE" ] || echo 1 > "/proc/sys/net/ipv6/conf/$VC_BRIDGE/disable_ipv6"
  ip link set "$VC_BRIDGE" up
  for i in $(seq "$n"); do
    node=node$i ip=$VC_SUBNET.$i veth=dvc-$node
    ip netns list | awk '{ print $1 }' | grep -qx "$node" && vc_die "a network namespace $node exists that is not ours"
    ip netns add "$node" || vc_die "ip netns add $node failed"
    ip link add "$veth" type veth peer name eth0 netns "$node" || vc_die "cannot make $veth"
    ip link set "$veth" master "$VC_BRIDGE" up
    ip -n "$node" link set lo up
    ip -n "$node" addr add "$ip/24" dev eth0
    ip -n "$node" link set eth0 up
    VC_NODE=$node VC_STATE=$VC_STATE VC_SHM=$VC_SHM_SIZE VC_TMP=$VC_TMP_SIZE \
      VC_SHARED=${VC_SHARED_TMP:-} \
      setsid nsenter --net="/run/netns/$node" unshare --uts --ipc --mount --propagation slave -- \
      /bin/sh -c "$HOLDER" </dev/null >"$VC_STATE/$node.holder.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] &&
        [ "$(readlink "/proc/$pid/ns/uts")" != "$(readlink /proc/self/ns/uts)" ] && break
      [ -e "/proc/$pid" ] || break
      sleep 0.1
    done
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] ||
      { cat "$VC_STATE/$node.holder.log" >&2; cmd_stop; vc_die "the holder of $node did not come up"; }
    echo "$node $ip $veth $pid $(vc_starttime "$pid")" >> "$VC_STATE/nodes"
  done
  # Every node answers node1 (a connect to a closed port is refused: the peer is there).
  local p1
  p1=$(vc_holder node1)
  for i in $(seq "$n"); do
    local answer
    answer=$(nsenter -t "$p1" -n timeout 3 bash -c "exec 3<>/dev/tcp/$VC_SUBNET.$i/9" 2>&1)
    [[ $answer == *refused* ]] ||
      { cmd_stop; vc_die "node1 cannot reach node$i: bridged traffic filtered? (iptables FORWARD, br_netfilter)"; }
  done
  vc_log "up: $(vc_nodes | tr '\n' ' ')(state in $VC_STATE)"
}

# ---- stop ----------------------------------------------------------------------------------
cmd_stop() {
  vc_root
  [ -d "$VC_STATE" ] || return 0
  [ ! -d "$VC_STATE/slurm" ] || cmd_slurm_stop
  local node holders=() work=() pid
  for node in $(vc_nodes); do
    pid=$(vc_holder "$node") && holders+=("$pid")
  done
  for node in $(vc_nodes); do
    for pid in $(vc_node_pids "$node"); do
      [[ " ${holders[*]} " == *" $pid "* ]] || work+=("$pid")
    done
  done
  term_then_kill "${work[@]}"
  term_then_kill "${holders[@]}"
  for node in $(vc_nodes); do
    ip link del "dvc-$node" 2>/dev/null
    ip netns del "$node" 2>/dev/null
  done
  ip link del "$VC_BRIDGE" 2>/dev/null
  if [ "$(cat "$VC_STATE/had-netns" 2>/dev/null)" = 0 ] && [ -d /run/netns ] &&
    [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null
  fi
  rm -rf "${VC_STATE:?}"
  vc_log "stopped"
}

# ---- mpirun --------------------------------------------------------------------------------
cmd_mpirun() {
  vc_root
  [ -f "$VC_STATE/nodes" ] || vc_die "no cluster (vcluster.sh start)"
  local args=(mpirun --mca plm_rsh_agent "$VC_DIR/rsh-agent.sh"
    --mca btl_tcp_if_include "$VC_SUBNET.0/24" --mca oob_tcp_if_include "$VC_SUBNET.0/24")
  local hosts=0 bind=0 a
  for a in "$@"; do
    case "$a" in
      --host|-host|-H|--hostfile|-hostfile) hosts=1 ;;
      --bind-to|--bind-to=*) bind=1 ;;
    esac
  done
  [ $hosts = 1 ] || args+=(--hostfile "$VC_STATE/hostfile")
  [ $bind = 1 ] || args+=(--bind-to none)
  # The nodes share this machine's cores: idle ranks must yield (Open MPI cannot tell).
  [ -n "${OMPI_MCA_mpi_yield_when_idle:-}" ] || args+=(--mca mpi_yield_when_idle 1)
  args+=(--allow-run-as-root "$@")
  vc_enter node1 "${args[@]}"
}

# ---- faults --------------------------------------------------------------------------------
cmd_fault() {
  vc_root
  local what=${1:-} node
  node=$(vc_resolve "${2:-}") || vc_die "fault kill|down|up NODE: no node '${2:-}'"
  case "$what" in
    kill)  # every process of the node but its holder
      local holder pids=() pid
      holder=$(vc_holder "$node")
      for pid in $(vc_node_pids "$node"); do [ "$pid" = "$holder" ] || pids+=("$pid"); done
      [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2>/dev/null
      vc_log "$node: killed ${#pids[@]} processes" ;;
    down|up)  # the node's cable: peers see silence, no FIN, no RST
      ip link set "dvc-$node" "$what"
      vc_log "$node: network $what" ;;
    *) vc_die "fault kill|down|up NODE" ;;
  esac
}

# ---- Slurm ---------------------------------------------------------------------------------
SLURM_PKGS=(slurmctld slurmd slurm-client munge libpmix-dev)
MUNGE_SOCKET=/run/munge/munge.socket.2

cmd_slurm_start() {
  vc_root
  [ -f "$VC_STATE/nodes" ] || vc_die "no cluster (vcluster.sh start)"
  local S=$VC_STATE/slurm missing=() p node nodes n
  for p in "${SLURM_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    vc_log "installing ${missing[*]}"
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
          --no-install-recommends "${missing[@]}"; }; } > "$VC_STATE/apt.log" 2>&1
    local rc=$?
    rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || { tail -20 "$VC_STATE/apt.log" >&2; vc_die "apt-get install failed"; }
  fi
  nodes=$(vc_nodes)
  n=$(wc -w <<<"$nodes")
  install -d -m 0755 "$S" "$S/etc" "$S/run" "$S/log" "$S/state" "$S/spool"
  for node in $nodes; do install -d -m 0755 "$S/spool/$node"; done
  # munge: its socket is a file, reachable from every node.
  munge_ok() { munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
  if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  [ -d /var/log/munge ] || install -d -o munge -g munge -m 0700 /var/log/munge
  [ -d /var/lib/munge ] || install -d -o munge -g munge -m 0711 /var/lib/munge
  if ! munge_ok; then
    runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --pid-file=/run/munge/munged.pid
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || vc_die "munged does not answer"
    local mp; mp=$(tr -dc '0-9' < /run/munge/munged.pid)
    echo "$mp $(vc_starttime "$mp")" > "$S/munged.pid"
  fi
  local mem; mem=$(awk -v n="$n" '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.8 / n }' /proc/meminfo)
  {
    cat <<EOF
ClusterName=dvc
SlurmctldHost=node1($VC_SUBNET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MinJobAge=5
KillWait=5
InactiveLimit=0
SlurmdTimeout=$VC_SLURMD_TIMEOUT
MessageTimeout=10
MailProg=/bin/true
SlurmdParameters=config_overrides
TmpFS=/tmp
EOF
    for node in $nodes; do
      echo "NodeName=$node NodeHostname=$node NodeAddr=$(vc_line "$node" | awk '{ print $2 }') CPUs=$VC_SLOTS RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=dvc Nodes=$(tr '\n' ',' <<<"$nodes" | sed 's/,$//') Default=YES DefaultTime=30 MaxTime=INFINITE State=UP"
  } > "$S/etc/slurm.conf"
  chmod 0644 "$S/etc/slurm.conf"
  local flags=(-i)
  [ -n "$(ls -A "$S/state")" ] || flags+=(-c)
  for node in $nodes; do
    nsenter -t "$(vc_holder "$node")" -m -- sh -c \
      "mkdir -p /etc/slurm; mountpoint -q /etc/slurm && umount /etc/slurm; mount --bind '$S/etc' /etc/slurm; rm -rf /tmp/spmix_appdir_*" ||
      vc_die "cannot mount the Slurm configuration on $node"
  done
  in_node() { local node=$1; shift; nsenter -t "$(vc_holder "$node")" -n -u -i -m --wd=/ -- "$@"; }
  # Start the daemons that are not running (all of them, or those a fault killed).
  running() {  # running PIDFILE: the daemon it names is alive
    local pid st
    [ -s "$1.st" ] && read -r pid st < "$1.st" && vc_alive "$pid" "$st"
  }
  if ! running "$S/run/slurmctld.pid"; then
    rm -f "$S/run/slurmctld.pid" "$S/run/slurmctld.pid.st"
    in_node node1 /usr/sbin/slurmctld "${flags[@]}"
  fi
  for node in $nodes; do
    running "$S/run/slurmd-$node.pid" && continue
    rm -f "$S/run/slurmd-$node.pid" "$S/run/slurmd-$node.pid.st"
    in_node "$node" /usr/sbin/slurmd -N "$node"
  done
  local f pid
  for _ in $(seq 50); do
    local up=1
    [ -s "$S/run/slurmctld.pid" ] || up=0
    for node in $nodes; do [ -s "$S/run/slurmd-$node.pid" ] || up=0; done
    [ $up = 1 ] && break
    sleep 0.1
  done
  for f in "$S"/run/*.pid; do
    [ -s "$f" ] || vc_die "a Slurm daemon did not start (see $S/log)"
    running "$f" && continue
    pid=$(tr -dc '0-9' < "$f"); echo "$pid $(vc_starttime "$pid")" > "$f.st"
  done
  local states
  for _ in $(seq 300); do
    states=$(in_node node1 sinfo -h -N -o '%N %T' 2>/dev/null)
    [ "$(awk '$2 ~ /^(idle|mixed|allocated|completing)$/' <<<"$states" | wc -l)" -ge "$n" ] && break
    for node in $(awk '$2 ~ /^(down|drain|fail)/ { print $1 }' <<<"$states"); do
      in_node node1 scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1
    done
    sleep 0.2
  done
  [ "$(awk '$2 ~ /^(idle|mixed|allocated|completing)$/' <<<"$states" | wc -l)" -ge "$n" ] ||
    { echo "$states" >&2; vc_die "Slurm's nodes did not come up (see $S/log)"; }
  vc_log "Slurm up: controller on node1, $n nodes x $VC_SLOTS CPUs, MpiDefault=pmix"
}

cmd_slurm_stop() {
  local S=$VC_STATE/slurm f pid st daemons=() node
  [ -d "$S" ] || return 0
  if pid=$(vc_holder node1); then
    timeout 10 nsenter -t "$pid" -n -u -i -m -- scancel --quiet --full \
      $(timeout 10 nsenter -t "$pid" -n -u -i -m -- squeue -h -o '%A' 2>/dev/null) 2>/dev/null
  fi
  for f in "$S"/run/*.pid.st; do
    [ -e "$f" ] || continue
    read -r pid st < "$f"
    vc_alive "$pid" "$st" && daemons+=("$pid")
  done
  term_then_kill "${daemons[@]}"
  if [ -s "$S/munged.pid" ]; then
    read -r pid st < "$S/munged.pid"
    vc_alive "$pid" "$st" && term_then_kill "$pid"
  fi
  for node in $(vc_nodes); do
    pid=$(vc_holder "$node") && nsenter -t "$pid" -m -- sh -c 'mountpoint -q /etc/slurm && umount /etc/slurm'
  done
  rm -rf "${S:?}"
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  exec)
    shift
    vc_root
    node=$(vc_resolve "${1:-}") || vc_die "exec NODE CMD...: no node '${1:-}'"
    shift
    [ $# -gt 0 ] || set -- "${SHELL:-/bin/bash}"
    vc_enter "$node" "$@" ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  slurm-start) cmd_slurm_start ;;
  slurm-stop) cmd_slurm_stop ;;
  fault) shift; cmd_fault "$@" ;;
  nodes) vc_nodes ;;
  pids) vc_node_pids "${2:-}" ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
