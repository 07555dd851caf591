#!/usr/bin/env bash
# A throwaway Ceph cluster for umio's RADOS tests and benchmark: one monitor,
# one OSD, no mgr, no auth, everything (config, data, logs, sockets) under
# one directory. No systemd, cephadm or LVM: the daemons run in the
# foreground as children of this script, which waits on them.
#
#   scripts/rados-cluster.sh run DIR [memstore|bluestore]
#       Builds the cluster in DIR (which must be empty or absent), starts it,
#       creates the pool `umio`, writes "ready" to DIR/state once a `rados
#       put` went through, then stays in the foreground until told to stop.
#       Prints the ceph.conf path on stdout once ready. Stops the OSD, then the
#       monitor, on SIGTERM or SIGINT, and exits.
#       While running it takes signals: SIGUSR1 kills the OSD (SIGKILL,
#       as a crash would), SIGUSR2 starts it again on the same data.
#       DIR/state says "ready", "osd-down" or "stopped"; DIR/pid holds
#       this script's pid.
#       Environment: RADOS_CLUSTER_WATCH_PID=pid stops the cluster when
#       that process is gone; RADOS_CLUSTER_REMOVE_DIR=1 removes DIR once
#       stopped.
#   scripts/rados-cluster.sh start DIR [memstore|bluestore]
#       `run` in the background; returns once the cluster is ready (or
#       failed, with its log on stderr).
#   scripts/rados-cluster.sh stop DIR       stops a cluster and waits for it.
#   scripts/rados-cluster.sh osd-kill DIR   kills the OSD; waits until down.
#   scripts/rados-cluster.sh osd-start DIR  restarts it; waits until ready
#       (bluestore only: a killed memstore OSD has lost its objects).
#
# Needs Debian's ceph-mon and ceph-osd (Ceph 16.2 Pacific here):
#   apt-get install -y --no-install-recommends ceph-mon ceph-osd librados-dev
#
# memstore (the default) keeps the OSD's objects in its memory: about 1-2 s
# to a usable pool, and its data does not survive an OSD restart. bluestore
# keeps them in DIR/block, a plain 2 GiB sparse file: about 5-6 s, and
# its data survives osd-kill/osd-start.
set -euo pipefail

POOL=umio

usage() {
  sed -n '2,31p' "$0" >&2
  exit 2
}

die() {
  echo "rados-cluster: $*" >&2
  exit 1
}

need() {
  for b in "$@"; do
    command -v "$b" >/dev/null 2>&1 ||
      die "$b not found; apt-get install -y --no-install-recommends ceph-mon ceph-osd librados-dev"
  done
}

# A free TCP port on 127.0.0.1: let the kernel pick one, then hand it on.
free_port() {
  python3 - <<'EOF' 2>/dev/null && return
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
  # No python: a random port in the dynamic range, checked against ss.
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    if ! (ss -ltn 2>/dev/null | grep -q ":$p "); then
      echo "$p"
      return
    fi
  done
}

write_conf() {
  local dir=$1 port=$2 store=$3
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $(cat "$dir/fsid")
mon_host = v2:127.0.0.1:$port
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
paxos_propose_interval = 0.01
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$name.pid
log_file = $dir/log/\$name.log
crash_dir = $dir/crash
keyring = /dev/null
# Clients of this cluster are tests: give up rather than hang for minutes
# when the monitor is gone.
client_mount_timeout = 15

[mon]
mon_data = $dir/mon
mon_allow_pool_delete = true

[osd]
osd_data = $dir/osd
osd_objectstore = $store
osd_journal_size = 64
memstore_device_bytes = 2147483648
bluestore_block_path = $dir/block
bluestore_block_size = 2147483648
bluestore_block_create = true
bluestore_fsck_on_mkfs = false
bluestore_cache_size = 268435456
osd_memory_target = 1073741824
EOF
}

ceph_q() {
  timeout 30 ceph -c "$DIR/ceph.conf" --connect-timeout 15 "$@"
}

start_osd() {
  ceph-osd -f -i 0 -c "$DIR/ceph.conf" >>"$DIR/log/osd.0.stdout" 2>&1 &
  OSD_PID=$!
  echo "$OSD_PID" >"$DIR/osd.pid"
}

# Up in the osdmap, then a write through to it: the pool is usable.
wait_osd_ready() {
  local deadline=$((SECONDS + 120))
  until ceph_q osd dump 2>/dev/null | grep -q '^osd\.0 up'; do
    kill -0 "$OSD_PID" 2>/dev/null || die "ceph-osd exited; see $DIR/log/osd.0.log"
    ((SECONDS < deadline)) || die "osd.0 not up after 120 s; see $DIR/log"
    sleep 0.2
  done
  echo ready >"$DIR/ready-object"
  until timeout 20 rados -c "$DIR/ceph.conf" -p "$POOL" put umio-cluster-ready \
    "$DIR/ready-object" 2>/dev/null; do
    ((SECONDS < deadline)) || die "rados put did not go through after 120 s; see $DIR/log"
    sleep 0.2
  done
}

# Signals a daemon and waits for it; one that has not exited 15 s after a
# SIGTERM (an OSD waits for the monitor's acknowledgement) is killed.
stop_daemon() {
  local sig=$1 pid=$2
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$sig" "$pid" 2>/dev/null || true
  (
    trap 'kill "$nap"; exit' TERM
    sleep 15 &
    nap=$!
    wait "$nap"
    kill -KILL "$pid"
  ) >/dev/null 2>&1 </dev/null &
  local guard=$!
  wait "$pid" 2>/dev/null || true
  kill "$guard" 2>/dev/null || true
}

stop_osd() {
  [[ -n ${OSD_PID:-} ]] && stop_daemon "$1" "$OSD_PID"
  OSD_PID=
}

shutdown() {
  # Best effort from here on: one failed step must not leave daemons behind.
  set +e
  [[ $(cat "$DIR/state" 2>/dev/null) == stopped ]] && return
  echo stopping >"$DIR/state"
  [[ -n ${WATCHER:-} ]] && kill "$WATCHER" 2>/dev/null
  stop_osd -TERM
  [[ -n ${MON_PID:-} ]] && stop_daemon -TERM "$MON_PID"
  echo stopped >"$DIR/state"
  if [[ -n ${RADOS_CLUSTER_REMOVE_DIR:-} ]]; then
    rm -rf "$DIR"
  fi
}

cmd_run() {
  DIR=$1
  local store=${2:-memstore}
  [[ $store == memstore || $store == bluestore ]] || die "object store must be memstore or bluestore, not $store"
  need ceph-mon ceph-osd monmaptool ceph rados uuidgen
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  [[ -z $(ls -A "$DIR") ]] || die "$DIR is not empty"
  mkdir -p "$DIR"/{mon,osd,run,log,crash}
  echo $$ >"$DIR/pid"
  # Whoever started this may have stopped reading its stdout and stderr
  # (a test process that exited): a write there must not kill the script
  # before it stops the daemons.
  trap '' PIPE
  echo starting >"$DIR/state"
  MON_PID= OSD_PID= WATCHER=
  # Whatever ends this script (a stop, a failure) stops the daemons first.
  trap shutdown EXIT
  trap 'exit 0' TERM INT

  uuidgen >"$DIR/fsid"
  local port
  port=$(free_port)
  write_conf "$DIR" "$port" "$store"
  monmaptool --create --fsid "$(cat "$DIR/fsid")" --addv a "[v2:127.0.0.1:$port]" \
    "$DIR/monmap" >/dev/null
  ceph-mon --mkfs -i a -c "$DIR/ceph.conf" --monmap "$DIR/monmap" \
    >>"$DIR/log/mkfs.log" 2>&1 || die "ceph-mon --mkfs failed; see $DIR/log/mkfs.log"
  ceph-mon -f -i a -c "$DIR/ceph.conf" >>"$DIR/log/mon.a.stdout" 2>&1 &
  MON_PID=$!

  local uuid
  uuid=$(uuidgen)
  local id
  id=$(ceph_q osd new "$uuid") || die "ceph osd new failed; see $DIR/log/mon.a.log"
  [[ $id == 0 ]] || die "ceph osd new gave id $id, not 0"
  ceph-osd --mkfs -i 0 -c "$DIR/ceph.conf" --osd-uuid "$uuid" \
    >>"$DIR/log/mkfs.log" 2>&1 || die "ceph-osd --mkfs failed; see $DIR/log/mkfs.log"
  ceph_q osd pool create "$POOL" 8 8 >/dev/null 2>&1 || die "pool create failed"
  start_osd
  wait_osd_ready
  echo ready >"$DIR/state"
  echo "$DIR/ceph.conf"

  # A test process that started this cluster and died (or never dropped
  # it) stops it too.
  if [[ -n ${RADOS_CLUSTER_WATCH_PID:-} ]]; then
    (
      while kill -0 "$RADOS_CLUSTER_WATCH_PID" 2>/dev/null; do sleep 1; done
      kill -TERM $$
    ) >/dev/null 2>&1 </dev/null &
    WATCHER=$!
  fi

  local want=
  trap 'want=osd-kill' USR1
  trap 'want=osd-start' USR2
  while :; do
    # Interrupted by the trapped signals; returns at once if the monitor died.
    wait "$MON_PID" 2>/dev/null || true
    kill -0 "$MON_PID" 2>/dev/null || {
      MON_PID=
      die "ceph-mon exited; see $DIR/log/mon.a.log"
    }
    case $want in
    osd-kill)
      stop_osd -KILL
      # Tell the monitor now rather than after the heartbeat grace (20 s).
      ceph_q osd down 0 >/dev/null 2>&1 || true
      echo osd-down >"$DIR/state"
      ;;
    osd-start)
      if [[ -z $OSD_PID ]]; then
        start_osd
        wait_osd_ready
      fi
      echo ready >"$DIR/state"
      ;;
    esac
    want=
  done
}

wait_state() {
  local dir=$1 want=$2 deadline=$((SECONDS + 180))
  until [[ $(cat "$dir/state" 2>/dev/null) == "$want" ]]; do
    [[ $want == stopped && ! -d $dir ]] && return
    ((SECONDS < deadline)) || die "cluster in $dir not $want after 180 s"
    if [[ -f $dir/pid ]] && ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      [[ $want == stopped ]] && return
      die "cluster in $dir exited; see $dir/log"
    fi
    sleep 0.1
  done
}

runner_pid() {
  [[ -f $1/pid ]] || die "no cluster in $1"
  cat "$1/pid"
}

case ${1:-} in
run)
  [[ $# -ge 2 ]] || usage
  cmd_run "$2" "${3:-memstore}"
  ;;
start)
  [[ $# -ge 2 ]] || usage
  mkdir -p "$2"
  log=$(mktemp)
  setsid "$0" run "$2" "${3:-memstore}" >"$log" 2>&1 </dev/null &
  until [[ -f $2/pid ]]; do
    kill -0 $! 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.05
  done
  (wait_state "$2" ready) || { cat "$log" >&2; exit 1; }
  rm -f "$log"
  echo "$(cd "$2" && pwd)/ceph.conf"
  ;;
stop)
  [[ $# -ge 2 ]] || usage
  kill -TERM "$(runner_pid "$2")" 2>/dev/null || true
  wait_state "$2" stopped
  ;;
osd-kill)
  [[ $# -ge 2 ]] || usage
  kill -USR1 "$(runner_pid "$2")"
  wait_state "$2" osd-down
  ;;
osd-start)
  [[ $# -ge 2 ]] && grep -q "osd_objectstore = memstore" "$2/ceph.conf" 2>/dev/null &&
    die "memstore loses its objects when the OSD is killed: start the cluster with bluestore"
  [[ $# -ge 2 ]] || usage
  kill -USR2 "$(runner_pid "$2")"
  wait_state "$2" ready
  ;;
*)
  usage
  ;;
esac
