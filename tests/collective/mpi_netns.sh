#!/bin/sh
# mpi_netns.sh MPIRUN RANK_PROGRAM - the MPI backend across two "hosts": two
# network namespaces joined by a veth pair, each with its own hostname (UTS
# namespace), talking TCP only (no shared-memory transport). mpirun starts the
# far rank through an rsh-style agent that enters the other namespace, as ssh
# would on a real second machine. Each rank gets its own TF_CONFIG, as the
# platform gives it, so backend AUTO has to choose MPI by itself.
#
# Addresses are private 10.x ones inside namespaces this script creates; nothing
# outside this machine is contacted. Everything is removed on exit.
# Exit 77 (skipped) with the reason when the netns probe (tests/lib/probe.sh)
# says namespaces cannot be made here; once it says they can, any failure to
# make them is a failure of the test.
set -u
mpirun=$1 prog=$2
. "$(dirname "$0")/../lib/probe.sh"
kiln_need netns
fail() { echo "FAIL coll_mpi_netns: $*"; exit 1; }

tag=kc$$
nsa=${tag}a nsb=${tag}b
# a /24 picked from the pid keeps parallel runs apart
net=10.213.$(( $$ % 250 + 1 ))
ipa=$net.1 ipb=$net.2
dir=$(mktemp -d)
cleanup() {
    ip netns del "$nsa" 2>/dev/null
    ip netns del "$nsb" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

ip netns add "$nsa" 2>"$dir/err" || fail "ip netns add failed: $(cat "$dir/err")"
ip netns add "$nsb" || fail "ip netns add failed"
ip link add "${tag}va" type veth peer name "${tag}vb" 2>"$dir/err" ||
    fail "cannot create a veth pair: $(cat "$dir/err")"
ip link set "${tag}va" netns "$nsa" && ip link set "${tag}vb" netns "$nsb" || exit 1
ip -n "$nsa" addr add "$ipa/24" dev "${tag}va" && ip -n "$nsb" addr add "$ipb/24" dev "${tag}vb" || exit 1
for ns in "$nsa" "$nsb"; do
    ip -n "$ns" link set lo up && ip -n "$ns" link set "${tag}v${ns#$tag}" up || exit 1
done
if command -v ping >/dev/null 2>&1; then
    ip netns exec "$nsa" ping -c1 -W2 "$ipb" >/dev/null 2>&1 || fail "the veth link does not carry traffic"
fi

# The rsh agent: mpirun calls it as `agent [options] HOST COMMAND...` to start
# its daemon on HOST; we enter that host's namespace instead of ssh-ing.
cat >"$dir/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
$ipb) exec ip netns exec $nsb unshare --uts sh -c "hostname ${tag}-b; \$*" ;;
*)    exec ip netns exec $nsa sh -c "\$*" ;;
esac
AGENT
chmod +x "$dir/agent"

# One TF_CONFIG per rank, as the platform writes them (chief first, then workers).
cluster="{\"chief\":[\"$ipa:2222\"],\"worker\":[\"$ipb:2222\"]}"
tf0="{\"cluster\":$cluster,\"task\":{\"type\":\"chief\",\"index\":0},\"environment\":\"cloud\"}"
tf1="{\"cluster\":$cluster,\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}"
# per-rank environment through a wrapper: rank i gets TF_CONFIG i
cat >"$dir/rank" <<RANK
#!/bin/sh
if [ "\$OMPI_COMM_WORLD_RANK" = 0 ]; then TF_CONFIG='$tf0'; else TF_CONFIG='$tf1'; fi
export TF_CONFIG
exec "$prog"
RANK
chmod +x "$dir/rank"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$nsa" unshare --uts sh -c "hostname ${tag}-a; exec timeout 90 \"$mpirun\" \
    -np 2 --host $ipa,$ipb --map-by node \
    --mca plm_rsh_agent \"$dir/agent\" \
    --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 \
    \"$dir/rank\"" >"$dir/out" 2>&1
rc=$?
cat "$dir/out"
if [ $rc -ne 0 ]; then echo "coll_mpi_netns: mpirun failed ($rc)"; exit 1; fi
# each rank must have run in its own namespace (its own hostname)
grep -q "mpi rank 0 of 2: ok (TF_CONFIG, backend auto) on host ${tag}-a" "$dir/out" &&
    grep -q "mpi rank 1 of 2: ok (TF_CONFIG, backend auto) on host ${tag}-b" "$dir/out" ||
    { echo "coll_mpi_netns: a rank did not report ok"; exit 1; }
echo "coll_mpi_netns: 2 ranks in namespaces $nsa ($ipa) and $nsb ($ipb): ok"
