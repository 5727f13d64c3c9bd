#!/bin/sh
# tests/lib/test_probe.sh MPIRUN RANK_PROGRAM - the probes and the skip
# machinery themselves:
#  1. every probe answers yes or no, and the cache (`probe.sh all`) says what
#     a fresh probe says;
#  2. a test naming an unknown probe fails (exit 1), it never skips;
#  3. in a user namespace (root mapped, no real privileges: what an
#     unprivileged build container gives) the privileged probes say no with a
#     reason, and the real coll_mpi_netns script skips (77) with its
#     "SKIP [netns]:" line instead of failing; the same in a chroot made of
#     bind mounts, where / is no mount point (the case that failed); there
#     too (no cgroup file system: /sys bound, not rbound) the cgroup probe
#     says no, the slurm probe's yes means the Slurm test cluster starts, and
#     where unmunge cannot decode a credential it says no with that reason;
#  4. scripts/test-summary --strict refuses a skipped software test, an
#     untagged skip and (where this is real root) a skipped privileged test,
#     and allows a skipped [gpu] test.
set -u
MPIRUN=${1:-mpirun}
RANK=${2:-/nonexistent}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PROBE=$SRC/tests/lib/probe.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# 1. the cache agrees with fresh probes
sh "$PROBE" all "$T/cache" >"$T/table" || bad "probe.sh all exited $?"
cat "$T/table"
for p in $(sh "$PROBE" list | cut -d' ' -f1); do
    [ -f "$T/cache/$p" ] || { bad "no cache file for $p"; continue; }
    cached=$(sed -n 1p "$T/cache/$p")
    KILN_PROBE_DIR= sh "$PROBE" check "$p" >"$T/out" 2>&1
    rc=$?
    case "$cached:$rc" in
    ok:0) ok "$p: cached yes, fresh yes" ;;
    no:77)
        if grep -q "^SKIP \[$p\]: .*; to run it: ." "$T/out"; then
            ok "$p: cached no, fresh skip line: $(cat "$T/out")"
        else
            bad "$p: the skip line is malformed: $(cat "$T/out")"
        fi
        ;;
    *) bad "$p: cached '$cached' but a fresh check exited $rc: $(cat "$T/out")" ;;
    esac
done

# 2. a typo in a test's needs is a failure
(. "$PROBE" && kiln_need no-such-probe) >"$T/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "unknown probe" "$T/out" && ok "an unknown probe fails the test" ||
    bad "an unknown probe gave exit $rc: $(cat "$T/out")"

# 3. an unprivileged container, as far as one can be made here (a new
#    environment: the cache of this run does not describe it)
. "$PROBE"
kiln_need userns
for p in netns mknod; do
    env -u KILN_PROBE_DIR unshare --user --map-root-user sh "$PROBE" check "$p" >"$T/out" 2>&1
    rc=$?
    [ $rc = 77 ] && grep -q "^SKIP \[$p\]: ..*; to run it: " "$T/out" &&
        ok "$p in a user namespace: $(cat "$T/out")" ||
        bad "$p in a user namespace: exit $rc: $(cat "$T/out")"
done
if [ -x "$RANK" ]; then
    env -u KILN_PROBE_DIR unshare --user --map-root-user sh "$SRC/tests/collective/mpi_netns.sh" "$MPIRUN" "$RANK" \
        >"$T/out" 2>&1
    rc=$?
    [ $rc = 77 ] && grep -q "^SKIP \[netns\]: " "$T/out" &&
        ok "coll_mpi_netns skips in a user namespace" ||
        bad "coll_mpi_netns in a user namespace: exit $rc (want 77): $(tail -3 "$T/out")"
else
    echo "note: no MPI rank program given, coll_mpi_netns's skip not checked"
fi

# 3b. a chroot, as the issue's debootstrap one: / is no mount point there, so
#     `ip netns add` works and `ip netns exec` fails ("mount --make-rslave /").
#     Built from bind mounts of this system in a private mount namespace (it
#     all vanishes with the namespace); needs real root, as the netns probe.
if kiln_probe netns; then
    R=$T/root
    RANKDIR=$(dirname "$RANK")
    env -u KILN_PROBE_DIR unshare --mount sh -c '
        r=$1 src=$2 rankdir=$3 mpirun=$4 rank=$5
        mkdir -p "$r/usr" "$r/etc" "$r/dev" "$r/proc" "$r/sys" "$r/tmp" "$r/run" \
            "$r$src" "$r$rankdir" || exit 1
        mount --make-rprivate / || exit 1
        # /sys bound as the issue'"'"'s debootstrap chroot binds it, not
        # recursively: no cgroup file system under $r/sys/fs/cgroup
        for d in usr etc dev; do mount --rbind "/$d" "$r/$d" || exit 1; done
        mount --bind /sys "$r/sys" || exit 1
        for l in bin lib lib64 sbin; do [ -L "/$l" ] && ln -s "usr/$l" "$r/$l"; done
        mount -t proc proc "$r/proc" && mount --bind "$src" "$r$src" || exit 1
        [ -d "$rankdir" ] && { mount --bind "$rankdir" "$r$rankdir" || exit 1; }
        chroot "$r" sh "$src/tests/lib/probe.sh" check netns >"$r/tmp/probe.out" 2>&1
        echo $? >"$r/tmp/probe.rc"
        chroot "$r" sh "$src/tests/lib/probe.sh" check cgroup >"$r/tmp/cgroup.out" 2>&1
        echo $? >"$r/tmp/cgroup.rc"
        if [ -x "$rank" ]; then
            chroot "$r" sh "$src/tests/collective/mpi_netns.sh" "$mpirun" "$rank" \
                >"$r/tmp/mpi.out" 2>&1
            echo $? >"$r/tmp/mpi.rc"
        fi
        # the slurm probe there, and where it says yes the test cluster
        # itself (its own ports: it_slurm may run beside this test)
        chroot "$r" sh "$src/tests/lib/probe.sh" check slurm >"$r/tmp/slurm.out" 2>&1
        echo $? >"$r/tmp/slurm.rc"
        if [ "$(cat "$r/tmp/slurm.rc")" = 0 ]; then
            # two tries: under the sanitizers CI loads both cores and once a
            # slurmd did not register within the cluster script'"'"'s 30 s
            # (n1 "unk*"); a probe whose yes is wrong fails both
            for try in 1 2; do
                chroot "$r" bash "$src/tests/service/slurm_cluster.sh" start /tmp/cluster 44995 \
                    >"$r/tmp/cluster.out" 2>&1
                echo $? >"$r/tmp/cluster.rc"
                [ "$(cat "$r/tmp/cluster.rc")" = 0 ] ||
                    tail -3 "$r/tmp/cluster/log/slurmd-n1.log" "$r/tmp/cluster/log/slurmctld.log" \
                        >>"$r/tmp/cluster.out" 2>/dev/null
                chroot "$r" bash "$src/tests/service/slurm_cluster.sh" stop /tmp/cluster \
                    >/dev/null 2>&1
                [ "$(cat "$r/tmp/cluster.rc")" = 0 ] && break
                echo "try $try failed" >>"$r/tmp/cluster.tries"
            done
        fi
        # and a chroot whose munge cannot decode a credential (the failure
        # issue 28 met: "Unauthorized credential for client UID=0"): the
        # packages are all there, the round trip is not
        printf "#!/bin/sh\necho \"unmunge: Error: Unauthorized credential for client UID=0 GID=0\" >&2\nexit 13\n" \
            >"$r/tmp/unmunge" && chmod 755 "$r/tmp/unmunge" &&
            mount --bind "$r/tmp/unmunge" "$r/usr/bin/unmunge" || exit 1
        chroot "$r" sh "$src/tests/lib/probe.sh" check slurm >"$r/tmp/slurm-broken.out" 2>&1
        echo $? >"$r/tmp/slurm-broken.rc"
    ' sh "$R" "$SRC" "$RANKDIR" "$MPIRUN" "$RANK"
    rc=$(cat "$R/tmp/probe.rc" 2>/dev/null)
    [ "$rc" = 77 ] && grep -q '^SKIP \[netns\]: ip netns exec failed' "$R/tmp/probe.out" &&
        ok "netns in a chroot: $(cat "$R/tmp/probe.out")" ||
        bad "netns in a chroot: exit '$rc': $(cat "$R/tmp/probe.out" 2>/dev/null)"
    # no cgroup file system there: svc_test_cgroup'"'"'s probe says so
    rc=$(cat "$R/tmp/cgroup.rc" 2>/dev/null)
    [ "$rc" = 77 ] && grep -q '^SKIP \[cgroup\]: no cgroup file system is mounted' "$R/tmp/cgroup.out" &&
        ok "cgroup in a chroot: $(cat "$R/tmp/cgroup.out")" ||
        bad "cgroup in a chroot: exit '$rc' (want 77): $(cat "$R/tmp/cgroup.out" 2>/dev/null)"
    if [ -x "$RANK" ]; then
        rc=$(cat "$R/tmp/mpi.rc" 2>/dev/null)
        [ "$rc" = 77 ] && grep -q '^SKIP \[netns\]: ' "$R/tmp/mpi.out" &&
            ok "coll_mpi_netns skips in a chroot" ||
            bad "coll_mpi_netns in a chroot: exit '$rc' (want 77): $(tail -3 "$R/tmp/mpi.out" 2>/dev/null)"
    fi
    # slurm: a yes there means the test's cluster starts there; a no is a
    # well-formed skip line
    rc=$(cat "$R/tmp/slurm.rc" 2>/dev/null)
    case $rc in
    0)
        if [ "$(cat "$R/tmp/cluster.rc" 2>/dev/null)" = 0 ]; then
            ok "slurm in a chroot: the probe says yes and the test cluster starts there$([ -s "$R/tmp/cluster.tries" ] && echo " (at the second try)")"
        else
            bad "slurm in a chroot: the probe says yes but the test cluster does not start, twice: $(tail -12 "$R/tmp/cluster.out" 2>/dev/null)"
        fi
        ;;
    77)
        grep -q '^SKIP \[slurm\]: ..*; to run it: ' "$R/tmp/slurm.out" &&
            ok "slurm in a chroot: $(cat "$R/tmp/slurm.out")" ||
            bad "slurm in a chroot: a malformed skip line: $(cat "$R/tmp/slurm.out")"
        ;;
    *) bad "slurm in a chroot: exit '$rc': $(cat "$R/tmp/slurm.out" 2>/dev/null)" ;;
    esac
    # a credential that does not round-trip is a no, naming why (where the
    # probe otherwise says yes, that is the only thing missing)
    rc=$(cat "$R/tmp/slurm-broken.rc" 2>/dev/null)
    want='^SKIP \[slurm\]: '
    [ "$(cat "$R/tmp/slurm.rc" 2>/dev/null)" = 0 ] &&
        want='^SKIP \[slurm\]: a munge credential does not round-trip (munge -n | unmunge): unmunge: Error: Unauthorized credential'
    [ "$rc" = 77 ] && grep -q "$want" "$R/tmp/slurm-broken.out" &&
        ok "slurm where munge cannot decode: $(cat "$R/tmp/slurm-broken.out")" ||
        bad "slurm where munge cannot decode: exit '$rc': $(cat "$R/tmp/slurm-broken.out" 2>/dev/null)"
else
    echo "note: the chroot check needs the netns probe ($KILN_PROBE_WHY): not run"
fi

# 4. the strict summary
junit() { # NAME SKIPLINE -> $T/j.xml with one skipped and one passed test
    cat >"$T/j.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="t" tests="2">
<testcase name="a_test" status="run"><system-out>1 passed, 0 failed</system-out></testcase>
<testcase name="$1" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
<system-out>some output
$2
</system-out></testcase>
</testsuite>
EOF
}
strict() { # WANT_RC NAME SKIPLINE
    junit "$2" "$3"
    python3 "$SRC/scripts/test-summary" "$T/j.xml" --strict >"$T/out" 2>&1
    rc=$?
    if [ $rc = "$1" ] && grep -q "2 tests, 1 skipped: $2" "$T/out"; then
        ok "strict summary of '$3': exit $rc"
    else
        bad "strict summary of '$3': exit $rc, want $1: $(cat "$T/out")"
    fi
}
strict 0 t_gpu "SKIP [gpu]: no CUDA device: none"
strict 1 t_tb "SKIP [tensorboard]: python3: no module; to run it: pip install tensorboard"
strict 1 t_untagged "SKIP: something is missing"
uidmap=$(awk 'NR == 1 { print $1, $2, $3 }' /proc/self/uid_map 2>/dev/null)
if [ "$(id -u)" = 0 ] && mountpoint -q / && [ "$uidmap" = "0 0 4294967295" ]; then
    strict 1 t_netns "SKIP [netns]: ip netns add failed: x; to run it: be root"
    # the same skip inside a user namespace is the honest answer
    junit t_netns "SKIP [netns]: ip netns add failed: x; to run it: be root"
    unshare --user --map-root-user python3 "$SRC/scripts/test-summary" "$T/j.xml" --strict \
        >"$T/out" 2>&1 && grep -q "allowed here: in a user namespace" "$T/out" &&
        ok "a privileged skip in a user namespace is allowed" ||
        bad "a privileged skip in a user namespace: $(cat "$T/out")"
else
    strict 0 t_netns "SKIP [netns]: ip netns add failed: x; to run it: be root"
fi
python3 "$SRC/scripts/test-summary" /nonexistent.xml >/dev/null 2>&1
[ $? = 2 ] && ok "an unreadable JUnit file is exit 2" || bad "an unreadable JUnit file"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
