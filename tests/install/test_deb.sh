#!/bin/bash
# tests/install/test_deb.sh BUILD - the Debian packages `make deb` made
# (BUILD/deb/*.deb; skips, saying so, where there are none: a package build
# takes minutes, so `make deb` is its own step). Checks the packages'
# contents and metadata (dpkg-deb): the split (kiln-train alone on compute
# nodes), /etc/kiln's conffiles, the unit, the maintainer scripts; the
# unit with systemd-analyze verify; lintian clean. Then, as root, in a
# fresh Debian 12 chroot (a copy of $KILN_DEB_CHROOT_TAR, by default one
# this test makes with debootstrap the first time and keeps under
# ~/.cache/kiln, never touched itself) with Debian's mirror reached: apt install
# ./kiln_*.deb, kilnd started through the unit's own command lines as the
# kiln user on a data dir of schema version 2 (every job kept), a job
# submitted with the installed kiln and finished; apt remove leaves
# /var/lib/kiln, apt purge removes it.
set -u
BUILD=$(cd "${1:?usage: $0 BUILD}" && pwd)
DEBS=$BUILD/deb
FAILS=0
PASSES=0
ok() { PASSES=$((PASSES + 1)); }
fail() { FAILS=$((FAILS + 1)); echo "FAIL: $*" >&2; }
check() { local w=$1; shift; if "$@"; then ok; else fail "$w"; fi; }
check_eq() { if [ "$2" = "$3" ]; then ok; else fail "$1: got '$2', want '$3'"; fi; }

kiln_deb=$(ls "$DEBS"/kiln_*.deb 2>/dev/null | head -1)
train_deb=$(ls "$DEBS"/kiln-train_*.deb 2>/dev/null | head -1)
if [ -z "$kiln_deb" ] || [ -z "$train_deb" ]; then
    echo "SKIP: no packages in $DEBS: run \`make deb\` first (it builds them, minutes)"
    exit 77
fi
T=$(mktemp -d /tmp/kiln-deb.XXXXXX)
CH=""
cleanup() {
    if [ -n "$CH" ]; then
        [ -n "${KPID_FILE:-}" ] && [ -s "$CH$KPID_FILE" ] && kill "$(cat "$CH$KPID_FILE")" 2>/dev/null
        # what this test started in the chroot (replicas outlive kilnd under
        # their monitors): the processes whose root is the copy, by id
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/root" 2>/dev/null)" = "$CH" ] && kill -9 "${p#/proc/}" 2>/dev/null
        done
        for m in proc dev/pts dev; do mountpoint -q "$CH/$m" && umount -l "$CH/$m"; done
    fi
    rm -rf "$T"
}
trap cleanup EXIT

# ---- what the packages hold ----
dpkg-deb -c "$kiln_deb" | awk '{print $6}' | sed 's|^\./|/|' >"$T/kiln.list"
dpkg-deb -c "$train_deb" | awk '{print $6}' | sed 's|^\./|/|' >"$T/train.list"
for f in /usr/bin/kilnd /usr/bin/kiln /usr/bin/kiln-monitor /usr/bin/kiln-slurm-task \
    /lib/systemd/system/kilnd.service /etc/kiln/kilnd.env /etc/kiln/tokens \
    /usr/share/man/man8/kilnd.8.gz /usr/share/man/man1/kiln.1.gz /usr/share/kiln/catalog/; do
    check "kiln holds $f" grep -qx -- "$f" "$T/kiln.list"
done
check "kiln-train holds kiln-train" grep -qx /usr/bin/kiln-train "$T/train.list"
check "kiln-train has no kilnd (compute nodes)" bash -c "! grep -q kilnd '$T/train.list'"
check "kiln does not hold kiln-train" bash -c "! grep -qx /usr/bin/kiln-train '$T/kiln.list'"
dpkg-deb --control "$kiln_deb" "$T/ctrl"
check_eq "conffiles" "$(sort "$T/ctrl/conffiles")" "$(printf '/etc/kiln/kilnd.env\n/etc/kiln/tokens')"
check "postinst makes the kiln user" grep -q "adduser --system --group --home /var/lib/kiln" "$T/ctrl/postinst"
check "postinst enables kilnd.service" grep -q "kilnd.service" "$T/ctrl/postinst"
check "postrm purges /var/lib/kiln" grep -q "rm -rf /var/lib/kiln" "$T/ctrl/postrm"
pv=$(dpkg-deb -f "$kiln_deb" Version)
check_eq "the package's upstream version is VERSION's" "${pv%-*}" \
    "$(head -n 1 "$(dirname "$0")/../../VERSION")"
dpkg-deb -x "$kiln_deb" "$T/x"
check "the unit checks the config first" \
    grep -q '^ExecStartPre=/usr/bin/kilnd --check-config $KILND_OPTS' "$T/x/lib/systemd/system/kilnd.service"
check "the unit reads /etc/kiln/kilnd.env" \
    grep -q '^EnvironmentFile=-/etc/kiln/kilnd.env' "$T/x/lib/systemd/system/kilnd.service"
# a stop (restart, upgrade) signals kilnd alone: mixed or control-group
# would SIGKILL the monitors and replicas, which are the unit's processes too;
# and no private /tmp, which systemd removes under them when the unit stops
check_eq "the unit's KillMode keeps the replicas" \
    "$(sed -n 's/^KillMode=//p' "$T/x/lib/systemd/system/kilnd.service")" process
check "the unit has no PrivateTmp" bash -c "! grep -q '^PrivateTmp=' '$T/x/lib/systemd/system/kilnd.service'"
if command -v systemd-analyze >/dev/null; then
    # the unit as installed, its programs and man page from the package tree
    dpkg-deb -x "$train_deb" "$T/x"
    sed "s|/usr/bin/|$T/x/usr/bin/|g; s|/etc/kiln/|$T/x/etc/kiln/|g" \
        "$T/x/lib/systemd/system/kilnd.service" >"$T/kilnd.service"
    check "systemd-analyze verify kilnd.service" \
        env MANPATH="$T/x/usr/share/man" systemd-analyze verify "$T/kilnd.service"
fi
if command -v lintian >/dev/null; then
    check "lintian: no error or warning" lintian --fail-on error,warning "$kiln_deb" "$train_deb"
else
    echo "note: no lintian here (apt-get install lintian): not checked"
fi

# ---- installed in a Debian 12 chroot ----
# The chroot: a tar of a plain debootstrap'd bookworm (only what debootstrap
# installs), made once here and reused; a chroot is root's to make.
TAR=${KILN_DEB_CHROOT_TAR:-$HOME/.cache/kiln/bookworm-chroot.tar}
if [ "$(id -u)" != 0 ]; then
    echo "note: not root: the chroot install is not tried (run as root to try it)"
    echo "$PASSES passed, $FAILS failed"
    [ "$FAILS" -eq 0 ]
    exit $?
fi
if [ ! -r "$TAR" ]; then
    echo "making a Debian 12 chroot with debootstrap for $TAR (once, minutes)"
    mkdir -p "$(dirname "$TAR")" "$T/boot"
    if debootstrap bookworm "$T/boot" >"$T/debootstrap.log" 2>&1 &&
        tar -C "$T/boot" -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"; then
        rm -rf "$T/boot"
    else
        rm -rf "$T/boot" "$TAR.tmp"
        fail "debootstrap bookworm: $(tail -2 "$T/debootstrap.log" | tr '\n' ' ')"
        echo "$PASSES passed, $FAILS failed"
        exit 1
    fi
fi
CH=$T/root
mkdir -p "$CH"
tar -C "$CH" -xf "$TAR"
[ -d "$CH/chroot" ] && CH=$CH/chroot # the tar may hold the directory itself
mount -t proc proc "$CH/proc"
mount --bind /dev "$CH/dev"
cp /etc/resolv.conf "$CH/etc/resolv.conf" 2>/dev/null
# the build machine's Debian 12 suites (its updates too: the packages were
# linked against them), in the copy only
[ -r /etc/apt/sources.list.d/debian.sources ] &&
    cp /etc/apt/sources.list.d/debian.sources "$CH/etc/apt/sources.list.d/" && rm -f "$CH/etc/apt/sources.list"
cp "$kiln_deb" "$train_deb" "$CH/tmp/"
inch() { chroot "$CH" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
# Debian's mirror is reachable from this project's machines (debootstrap
# just used it): an apt that cannot reach it fails the test
if ! inch apt-get update -qq >"$T/apt.log" 2>&1; then
    fail "apt-get update in the chroot: $(tail -3 "$T/apt.log" | tr '\n' ' ')"
    echo "$PASSES passed, $FAILS failed"
    exit 1
fi
check "apt install ./kiln_*.deb ./kiln-train_*.deb" \
    inch env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "/tmp/$(basename "$kiln_deb")" "/tmp/$(basename "$train_deb")" >>"$T/apt.log" 2>&1 ||
    tail -20 "$T/apt.log" >&2
check "the kiln user exists" inch id kiln >/dev/null
check_eq "/var/lib/kiln is kiln's" "$(inch stat -c %U:%a /var/lib/kiln)" "kiln:750"
check_eq "the tokens file is kiln's alone" "$(inch stat -c %U:%a /etc/kiln/tokens)" "kiln:600"
check_eq "kilnd --version in the chroot" "$(inch kilnd --version)" "$(inch kiln --version | sed 's/^kiln /kilnd /')"
# a data dir of an earlier kilnd (schema version 2: tests/service/upgrade),
# which the packaged kilnd upgrades keeping every job
python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[2]); c.executescript(open(sys.argv[1]).read()); c.close()' \
    "$(dirname "$0")/../service/upgrade/v2.sql" "$CH/var/lib/kiln/kilnd.db"
inch chown kiln:kiln /var/lib/kiln/kilnd.db
# the unit's command lines, as the unit runs them: User=kiln, its
# EnvironmentFile, ExecStartPre then ExecStart (no systemd in a chroot)
KPID_FILE=/tmp/kilnd.pid
unit_start='set -a; . /etc/kiln/kilnd.env; set +a; cd /var/lib/kiln &&
  /usr/bin/kilnd --check-config $KILND_OPTS >/tmp/check.out 2>&1 &&
  { /usr/bin/kilnd $KILND_OPTS >/tmp/kilnd.log 2>&1 & echo $! >/tmp/kilnd.pid; }'
check "the unit's ExecStartPre and ExecStart as kiln" inch setpriv --reuid=kiln --regid=kiln --init-groups \
    sh -c "$unit_start" || cat "$CH/tmp/check.out" >&2
check "the config check found no problem" grep -q "check-config: no problems" "$CH/tmp/check.out"
for _ in $(seq 1 100); do [ -s "$CH/var/lib/kiln/kilnd.addr" ] && break; sleep 0.1; done
check "kilnd serves (kilnd.addr)" test -s "$CH/var/lib/kiln/kilnd.addr"
cat >"$CH/tmp/job.yaml" <<'YAML'
trainingInput:
  scaleTier: BASIC
  region: us-central1
  masterConfig:
    containerCommand: [sh, -c, "echo packaged-ok"]
YAML
check "kiln jobs submit in the chroot" inch kiln jobs submit training deb_1 --config /tmp/job.yaml \
    --stream-logs >"$T/submit.out" 2>&1 || cat "$T/submit.out" >&2
check "the job's log says so" grep -q packaged-ok "$T/submit.out"
check_eq "the job SUCCEEDED" "$(inch kiln jobs describe deb_1 --format json | sed -n 's/.*"state": *"\([A-Z]*\)".*/\1/p' | head -1)" SUCCEEDED
inch env KILN_PROJECT=p1 kiln jobs list --format json >"$T/list.json" 2>&1
for j in up_done up_failed up_queued up_running up_study up_inqueue; do
    check "the upgraded store kept $j" grep -q "\"$j\"" "$T/list.json"
done
# and its active jobs still answer to cancel
for j in up_queued up_running up_study up_inqueue; do
    check "cancel $j" inch env KILN_PROJECT=p1 kiln jobs cancel "$j" >/dev/null
done
for j in up_queued up_running up_study up_inqueue; do
    s=""
    for _ in $(seq 1 100); do
        s=$(inch env KILN_PROJECT=p1 kiln jobs describe "$j" --format json |
            sed -n 's/^  "state": *"\([A-Z]*\)".*/\1/p' | head -1)
        [ "$s" = CANCELLED ] && break
        sleep 0.2
    done
    check_eq "$j CANCELLED" "$s" CANCELLED
done

# ---- a package upgrade while a job runs ----
# What the upgrade does with the unit, done here by hand (no systemd in a
# chroot): the unit's stop as systemd carries it out for the installed
# unit's KillMode (process: SIGTERM to kilnd; mixed: SIGTERM to kilnd, then
# SIGKILL to the unit's other processes, here every process of the kiln
# user in the chroot; control-group: both to all), the newer package
# installed over the running data, and the unit's start. The newer package
# is this one with a higher version (dpkg-deb -R, the version raised,
# dpkg-deb -b): the same programs, so it is the upgrade's own steps that are
# tested (maintainer scripts, conffiles, the unit's stop), not a migration
# (it_upgrade.sh and the schema-2 store above test those).
kiln_uid=$(inch id -u kiln)
in_ch_of_kiln() { # the pids of the kiln user's processes in the chroot (by
    local p       # uid: the host has no name for the chroot's kiln user)
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$CH" ] || continue
        [ "$(stat -c %u "$p" 2>/dev/null)" = "$kiln_uid" ] && echo "${p#/proc/}"
    done
}
alive() { # a process that runs (a zombie has ended)
    [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat")" != Z ]
}
unit_stop() {
    local mode main
    mode=$(sed -n 's/^KillMode=//p' "$CH/lib/systemd/system/kilnd.service")
    main=$(cat "$CH$KPID_FILE")
    case ${mode:-control-group} in
    control-group) for p in $(in_ch_of_kiln); do kill -TERM "$p" 2>/dev/null; done ;;
    *) kill -TERM "$main" 2>/dev/null ;;
    esac
    for _ in $(seq 1 100); do kill -0 "$main" 2>/dev/null || break; sleep 0.1; done
    case ${mode:-control-group} in
    mixed | control-group) for p in $(in_ch_of_kiln); do kill -KILL "$p" 2>/dev/null; done ;;
    esac
    sleep 0.5
}
cat >"$CH/tmp/live.yaml" <<'YAML'
trainingInput:
  scaleTier: BASIC
  region: us-central1
  masterConfig:
    containerCommand: [sh, -c, "echo live-up; while [ ! -e /tmp/go.live ]; do sleep 0.2; done; echo live-ok"]
YAML
check "submit deb_live" inch kiln jobs submit training deb_live --config /tmp/live.yaml >"$T/live.out" 2>&1 ||
    cat "$T/live.out" >&2
live_state() { inch kiln jobs describe deb_live --format json | sed -n 's/^  "state": *"\([A-Z]*\)".*/\1/p' | head -1; }
for _ in $(seq 1 100); do [ "$(live_state)" = RUNNING ] && break; sleep 0.2; done
check_eq "deb_live RUNNING" "$(live_state)" RUNNING
rpid=""
for _ in $(seq 1 50); do
    rpid=$(for p in $(in_ch_of_kiln); do grep -qa 'go.live' "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done | head -1)
    [ -n "$rpid" ] && break
    sleep 0.2
done
check "deb_live's replica runs ($rpid)" test -n "$rpid"
echo "# a site's edit" >>"$CH/etc/kiln/kilnd.env"
unit_stop
check "the unit's stop ended kilnd" bash -c "! kill -0 $(cat "$CH$KPID_FILE") 2>/dev/null"
check "the unit's stop left deb_live's replica running" alive "${rpid:-no-pid}"
nv="${pv}+up1"
dpkg-deb -R "$kiln_deb" "$T/next"
sed -i "s/^Version: .*/Version: $nv/" "$T/next/DEBIAN/control"
dpkg-deb -b "$T/next" "$CH/tmp/kiln_next.deb" >/dev/null
check "apt install the newer kiln over the running data" \
    inch env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    /tmp/kiln_next.deb >>"$T/apt.log" 2>&1 || tail -20 "$T/apt.log" >&2
check_eq "the upgrade installed $nv" "$(inch dpkg-query -W -f '${Version}' kiln)" "$nv"
check "the upgrade kept the site's edit of kilnd.env" grep -q "^# a site's edit" "$CH/etc/kiln/kilnd.env"
check "the upgrade left deb_live's replica running" alive "${rpid:-no-pid}"
rm -f "$CH/var/lib/kiln/kilnd.addr"
check "the unit's start after the upgrade" inch setpriv --reuid=kiln --regid=kiln --init-groups \
    sh -c "$unit_start" || cat "$CH/tmp/check.out" >&2
for _ in $(seq 1 100); do [ -s "$CH/var/lib/kiln/kilnd.addr" ] && break; sleep 0.1; done
check_eq "deb_live RUNNING after the upgrade" "$(live_state)" RUNNING
check_eq "deb_live: no restart" "$(inch kiln jobs describe deb_live --format json |
    sed -n 's/.*"restarts": *\([0-9]*\).*/\1/p' | head -1)" 0
touch "$CH/tmp/go.live"
for _ in $(seq 1 100); do [ "$(live_state)" = SUCCEEDED ] && break; sleep 0.2; done
check_eq "deb_live SUCCEEDED, adopted by the upgraded kilnd" "$(live_state)" SUCCEEDED
inch kiln jobs stream-logs deb_live >"$T/live.log" 2>&1
check "deb_live's log has its end" grep -q live-ok "$T/live.log"

kill "$(cat "$CH$KPID_FILE")" 2>/dev/null
sleep 1
check "apt remove" inch env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq kiln >>"$T/apt.log" 2>&1
check "remove leaves the data" test -s "$CH/var/lib/kiln/kilnd.db"
check "remove leaves the conffiles" test -e "$CH/etc/kiln/kilnd.env"
check "apt purge" inch env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq kiln >>"$T/apt.log" 2>&1
check "purge removes /var/lib/kiln" test ! -e "$CH/var/lib/kiln"
check "purge removes /etc/kiln" test ! -e "$CH/etc/kiln"
echo "$PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]
