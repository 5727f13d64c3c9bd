#!/bin/bash
# tests/service/slurm_cluster.sh - a throwaway Slurm cluster on this machine,
# all of it under one directory, on loopback (with --netns, below, each node
# a host of its own):
#   munged with its own key and socket, slurmctld, and two slurmd (-N n1,
#   -N n2) with 2 fake GPUs each (typed GRES gpu:t4) (character devices made with mknod and
#   declared through gres.conf File=, so Slurm sets CUDA_VISIBLE_DEVICES).
#
#   slurm_cluster.sh start DIR [PORT [--accounting] [--netns]]
#                                       prints SLURM_CONF=DIR/slurm.conf
#   slurm_cluster.sh stop DIR           stops everything started under DIR
#                                       (idempotent: a second stop, or a stop
#                                       after a crash, does no harm)
#
# PORT (default 44900) is slurmctld's; the two slurmd take PORT+1 and PORT+2.
# KILN_SLURM_NODES=3 adds n3 (2 GPUs too) on the next free port (PORT+3, or
# PORT+4 with --accounting): a job's component can then span nodes.
# --accounting (opt-in) adds Slurm's accounting: a MariaDB of the cluster's
# own (mariadbd with its datadir and socket under DIR/db, no network) and
# slurmdbd on 127.0.0.1:PORT+3, the cluster registered with sacctmgr, and
# slurm.conf enforcing associations, limits and QOS with multifactor
# priority (Fairshare) (docs/slurm.md, "Queues").
# --netns (opt-in; or KILN_SLURM_NETNS=1) makes each node a host of its own:
# a bridge kb<PORT> in this (root) network namespace with 10.A.B.1/24 (A.B
# picked from PORT, so clusters on different ports do not collide), and per
# node nK a network namespace kiln-<PORT>-nK joined to it by a veth pair,
# with the address 10.A.B.(10+K), and slurmd started in it with a UTS
# namespace of its own (host name nK). slurm.conf then names each node
# NodeAddr=10.A.B.(10+K) NodeHostname=nK and slurmctld (in the root
# namespace) at the bridge's address (SlurmctldAddr): addresses, names and
# host files are really used. Needs what the netns probe (tests/lib/probe.sh)
# tries; `stop` removes the namespaces, veths and bridge (named in
# DIR/netns.env, written before any is made).
# Every wait is bounded; a start that fails stops what it started.
# Needs root (slurmd), munged, slurmctld and slurmd (Debian: slurm-wlm munge);
# --accounting also slurmdbd and mariadbd (Debian: slurmdbd mariadb-server).
set -u

# kiln_munge_start/stop: the munge setup the slurm probe tries first
. "$(dirname "$0")/../lib/probe.sh"

usage="usage: $0 start|stop DIR [PORT [--accounting] [--netns]]"
cmd=${1:?$usage}
DIR=${2:?$usage}
PORT=${3:-44900}
ACCT=
NETNS=
[ "${KILN_SLURM_NETNS:-}" = 1 ] && NETNS=1
for o in "${@:4}"; do
    case $o in
    --accounting) ACCT=1 ;;
    --netns) NETNS=1 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
done
NODES=${KILN_SLURM_NODES:-2}
case $NODES in 2 | 3) ;; *) echo "slurm_cluster: KILN_SLURM_NODES is 2 or 3" >&2; exit 2 ;; esac
NAMES=$(seq -f 'n%g' 1 "$NODES")
# node_port N: slurmd's port of node N (slurmdbd keeps PORT+3)
node_port() { if [ "$1" -ge 3 ] && [ -n "$ACCT" ]; then echo $((PORT + $1 + 1)); else echo $((PORT + $1)); fi; }

stop_all() {
    local f pid
    # mariadbd after slurmdbd, which writes to it as it stops
    for f in "$DIR"/run/slurmd-n[0-9].pid "$DIR"/run/slurmctld.pid \
        "$DIR"/run/slurmdbd.pid "$DIR"/db/mariadbd.pid "$DIR"/munge/munged.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        kill -TERM "$pid" 2>/dev/null
        # bounded: 10 s (mariadbd flushes InnoDB as it stops)
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        rm -f "$f"
    done
}

# net_down: removes the namespaces, veths and bridge named in
# DIR/netns.env (each only if it is there: idempotent). Deleting a
# namespace deletes the veth end in it, and with it its peer on the bridge;
# the host ends are deleted too in case a namespace went first.
net_down() {
    local ns i
    [ -f "$DIR/netns.env" ] || return 0
    # shellcheck disable=SC1091 # written by net_names below
    . "$DIR/netns.env"
    for i in $NET_NODES; do
        ns=$NET_NS_PREFIX$i
        # its processes first (a slurmd whose pid file is gone, a step's
        # leftovers): a namespace with processes in it outlives `ip netns del`
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        ip link del "$NET_VETH_PREFIX$i" 2>/dev/null
    done
    ip link del "$NET_BRIDGE" 2>/dev/null
    rm -f "$DIR/netns.env"
    return 0
}

if [ "$cmd" = stop ]; then
    stop_all
    net_down
    exit 0
fi
[ "$cmd" = start ] || { echo "$usage" >&2; exit 2; }

mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
# (set +e: stop_all's last kill -9 of a daemon already gone fails, and
# under set -e that ended the clean-up after its first daemon; so the
# trap exits itself)
trap 'echo "slurm_cluster: start failed; logs in $DIR/log" >&2; set +e; stop_all; net_down; exit 1' ERR
set -eE
mkdir -p "$DIR/run" "$DIR/log" "$DIR/state" "$DIR/spool" "$DIR/dev"

# --netns: the nodes' network. 10.A.B.0/24 from PORT: A in 100-199 (clear
# of podman's 10.88 and coll_mpi_netns's 10.213), B = PORT mod 256; names
# carry PORT (a bridge's and a veth's fit Linux's 15 characters)
CTL_ADDR=
node_addr() { echo "$NET.$((10 + $1))"; }
# net_names: DIR/netns.env, what net_down removes, written before any of it
# is made: a start that fails half-way, or a crash, leaves stop the names
net_names() {
    printf 'NET_NODES="%s"\nNET_NS_PREFIX=%s\nNET_VETH_PREFIX=%s\nNET_BRIDGE=%s\n' \
        "$(seq -s ' ' 1 "$NODES")" "kiln-$PORT-n" "kv$PORT-" "kb$PORT" >"$DIR/netns.env"
    . "$DIR/netns.env"
}
if [ -n "$NETNS" ]; then
    if ! why=$(probe_netns); then
        echo "slurm_cluster: --netns: $why" >&2
        false
    fi
    NET=10.$((100 + PORT / 256 % 100)).$((PORT % 256))
    CTL_ADDR=$NET.1
    # the names carry PORT: a cluster whose slurmctld listens there has
    # them, and is left alone (before net_names, so that this start's
    # clean-up cannot remove its network)
    if [ -n "$(ss -Htln "( sport = :$PORT )" 2>/dev/null)" ]; then
        echo "slurm_cluster: --netns: port $PORT is taken (a cluster runs there?)" >&2
        false
    fi
    net_names
    # leftovers of a cluster on this port that was killed outright
    if ip link show "$NET_BRIDGE" >/dev/null 2>&1 || ip netns list | grep -q "^$NET_NS_PREFIX"; then
        net_down
        net_names
    fi
    if [ -n "$(ip -4 route show "$NET.0/24")" ]; then
        echo "slurm_cluster: --netns: $NET.0/24 is routed already: $(ip -4 route show "$NET.0/24")" >&2
        false
    fi
    ip link add "$NET_BRIDGE" type bridge
    ip addr add "$CTL_ADDR/24" dev "$NET_BRIDGE"
    ip link set "$NET_BRIDGE" up
    for i in $NET_NODES; do
        ns=$NET_NS_PREFIX$i
        ip netns add "$ns"
        ip link add "$NET_VETH_PREFIX$i" type veth peer name eth0 netns "$ns"
        ip link set "$NET_VETH_PREFIX$i" master "$NET_BRIDGE" up
        ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
    done
fi

# munge: a key of its own (never the machine's), its socket and log under
# DIR/munge, started as the slurm probe starts it (tests/lib/probe.sh). Its
# log shows "Unauthorized credential for client UID=0" as slurmctld and
# slurmd start, which Slurm's NEWS calls no cause for concern: when the
# cluster does not start, the reason is elsewhere in DIR/log
if ! why=$(kiln_munge_start "$DIR/munge"); then
    echo "slurm_cluster: $why" >&2
    false
fi
SOCK=$DIR/munge/munge.socket

# fake GPUs: /dev/null's numbers, two per node
for n in $NAMES; do
    for g in 0 1; do [ -e "$DIR/dev/${n}gpu$g" ] || mknod "$DIR/dev/${n}gpu$g" c 1 3; done
done

for n in $NAMES; do echo "NodeName=$n Name=gpu Type=t4 File=$DIR/dev/${n}gpu[0-1]"; done >"$DIR/gres.conf"
# nodes known by host name, as a real slurm.conf names them: no NodeAddr,
# so Slurm's (sinfo's %o, scontrol's NodeAddr) is the name "localhost",
# which kilnd must resolve before it hands it out as an address
# (--netns: each node a host of its own, known by its name and address)
NODE_CONF=$(for i in $(seq 1 "$NODES"); do
    if [ -n "$NETNS" ]; then
        host="NodeAddr=$(node_addr "$i") NodeHostname=n$i"
    else
        host=NodeHostname=localhost
    fi
    echo "NodeName=n$i $host Port=$(node_port "$i") CPUs=2 RealMemory=4000 Gres=gpu:t4:2 State=UNKNOWN"
done)

# accounting: slurm.conf's part of it (slurmdbd itself starts below)
# jobacct_gather/linux: sstat reads a running step's CPU time and memory
# (the autoscaler of elastic jobs under --executor slurm), each second
ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1"
if [ -n "$ACCT" ]; then
    ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 3))
AccountingStoragePass=$SOCK
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightQOS=10000
JobAcctGatherType=jobacct_gather/none"
fi

# cgroups: the cluster uses none (proctrack/linuxproc, task/none,
# jobacct_gather/linux read /proc), but slurmd 22.05 loads a cgroup plugin
# as it starts, and its default ("autodetect") fails where no cgroup file
# system is mounted (a debootstrap'd chroot: "No filesystem mounted on
# /sys/fs/cgroup ... Unable to initialize cgroup plugin"). There a named
# plugin, which touches no cgroup until a cgroup plugin uses it, lets the
# cluster start and run what it runs everywhere else; where cgroups are
# mounted Slurm's own autodetection stays.
if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = sysfs ] || [ ! -d /sys/fs/cgroup ]; then
    echo "CgroupPlugin=cgroup/v1" >"$DIR/cgroup.conf"
else
    # not empty: slurmd warns of an empty file
    echo "# kiln's test cluster: Slurm's own cgroup autodetection" >"$DIR/cgroup.conf"
fi

cat >"$DIR/slurm.conf" <<EOF
ClusterName=kilntest
SlurmctldHost=localhost
${CTL_ADDR:+SlurmctldAddr=$CTL_ADDR
}SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
$ACCT_CONF
JobCompType=jobcomp/none
$NODE_CONF
PartitionName=kiln Nodes=$(echo $NAMES | tr ' ' ,) Default=YES MaxTime=INFINITE State=UP
EOF

export SLURM_CONF=$DIR/slurm.conf

# accounting: the cluster's own MariaDB (its socket under DIR/db, no TCP),
# slurmdbd on loopback, and the cluster registered before slurmctld starts
if [ -n "$ACCT" ]; then
    DB=$DIR/db
    mkdir -p "$DB"
    export MYSQL_UNIX_PORT=$DB/mariadb.sock # slurmdbd's client library's socket
    if [ ! -d "$DB/data/mysql" ]; then
        mariadb-install-db --no-defaults --user=root --datadir="$DB/data" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$DIR/log/mariadb-install.log" 2>&1
    fi
    setsid mariadbd --no-defaults --user=root --datadir="$DB/data" --socket="$DB/mariadb.sock" \
        --pid-file="$DB/mariadbd.pid" --skip-networking --log-error="$DIR/log/mariadb.log" \
        --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
    # bounded: 30 s
    for _ in $(seq 1 300); do
        mariadb-admin --no-defaults --socket="$DB/mariadb.sock" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    mariadb-admin --no-defaults --socket="$DB/mariadb.sock" ping >/dev/null
    cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 3))
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=kiln_acct_db
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
EOF
    chmod 600 "$DIR/slurmdbd.conf"
    slurmdbd
    # bounded: 30 s (it makes its tables on a first start)
    for _ in $(seq 1 300); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.1; done
    sacctmgr -n list cluster >/dev/null
    sacctmgr -n -P list cluster format=cluster | grep -qx kilntest ||
        sacctmgr -i add cluster kilntest >/dev/null
fi

slurmctld -c -f "$SLURM_CONF"
for _ in $(seq 1 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping >/dev/null 2>&1
for i in $(seq 1 "$NODES"); do
    if [ -n "$NETNS" ]; then
        # in the node's namespace, with its own host name (slurmd forks
        # into the background from there, and stays in both namespaces).
        # nsenter, not `ip netns exec`: that one mounts a sysfs of the
        # namespace's own over /sys, which hides /sys/fs/cgroup, and
        # slurmd's cgroup plugin then fails ("No filesystem mounted on
        # /sys/fs/cgroup")
        # shellcheck disable=SC2016 # expanded by that sh
        nsenter --net="/run/netns/$NET_NS_PREFIX$i" unshare --uts \
            sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' _ "n$i" "$SLURM_CONF"
    else
        slurmd -f "$SLURM_CONF" -N "n$i"
    fi
done
# every node idle (bounded: 30 s)
up=0
for _ in $(seq 1 300); do
    up=$(sinfo -h -N -p kiln -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)
    [ "$up" -ge "$NODES" ] && break
    sleep 0.1
done
if [ "$up" -lt "$NODES" ]; then
    sinfo -N -p kiln >&2 || true
    false
fi
trap - ERR
echo "SLURM_CONF=$SLURM_CONF"
