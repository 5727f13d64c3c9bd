#!/bin/bash
# tests/service/slurm_cluster.sh - a throwaway Slurm cluster on this machine,
# all of it under one directory, on loopback:
#   munged with its own key and socket, slurmctld, and two slurmd (-N n1,
#   -N n2) with 2 fake GPUs each (typed GRES gpu:t4) (character devices made with mknod and
#   declared through gres.conf File=, so Slurm sets CUDA_VISIBLE_DEVICES).
#
#   slurm_cluster.sh start DIR [PORT] [--accounting]
#                                       prints SLURM_CONF=DIR/slurm.conf
#   slurm_cluster.sh stop DIR           stops everything started under DIR
#
# PORT (default 44900) is slurmctld's; the two slurmd take PORT+1 and PORT+2.
# KILN_SLURM_NODES=3 adds n3 (2 GPUs too) on the next free port (PORT+3, or
# PORT+4 with --accounting): a job's component can then span nodes.
# --accounting (opt-in) adds Slurm's accounting: a MariaDB of the cluster's
# own (mariadbd with its datadir and socket under DIR/db, no network) and
# slurmdbd on 127.0.0.1:PORT+3, the cluster registered with sacctmgr, and
# slurm.conf enforcing associations, limits and QOS with multifactor
# priority (Fairshare) (docs/slurm.md, "Queues").
# Every wait is bounded; a start that fails stops what it started.
# Needs root (slurmd), munged, slurmctld and slurmd (Debian: slurm-wlm munge);
# --accounting also slurmdbd and mariadbd (Debian: slurmdbd mariadb-server).
set -u

# kiln_munge_start/stop: the munge setup the slurm probe tries first
. "$(dirname "$0")/../lib/probe.sh"

cmd=${1:?usage: $0 start|stop DIR [PORT [--accounting]]}
DIR=${2:?usage: $0 start|stop DIR [PORT [--accounting]]}
PORT=${3:-44900}
ACCT=
[ "${4:-}" = --accounting ] && ACCT=1
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

if [ "$cmd" = stop ]; then
    stop_all
    exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2; }

mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
trap 'echo "slurm_cluster: start failed; logs in $DIR/log" >&2; stop_all' ERR
set -eE
mkdir -p "$DIR/run" "$DIR/log" "$DIR/state" "$DIR/spool" "$DIR/dev"

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
NODE_CONF=$(for i in $(seq 1 "$NODES"); do
    echo "NodeName=n$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(node_port "$i") CPUs=2 RealMemory=4000 Gres=gpu:t4:2 State=UNKNOWN"
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

cat >"$DIR/slurm.conf" <<EOF
ClusterName=kilntest
SlurmctldHost=localhost
SlurmctldPort=$PORT
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
for n in $NAMES; do slurmd -f "$SLURM_CONF" -N "$n"; done
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
