#!/bin/sh
# mpi_local.sh MPIRUN RANK_PROGRAM - the MPI backend with 2 ranks on this host:
# first a normal run, then one where rank 1 hangs and rank 0's watchdog must
# end the job within the (1 s) timeout, with a message, instead of hanging.
set -u
mpirun=$1 prog=$2
# Running as root needs OpenMPI's explicit consent; --oversubscribe because
# CI machines may have fewer cores than ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 100 "$mpirun" --oversubscribe -np 2 --mca btl self,vader,tcp "$prog" || exit 1

out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
KILN_TEST_MPI_HANG=1 timeout 60 "$mpirun" --oversubscribe -np 2 -x KILN_TEST_MPI_HANG \
    --mca btl self,vader,tcp "$prog" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    cat "$out"; echo "mpi hang: expected the watchdog to abort the job (rc $rc)"; exit 1
fi
grep -q "kiln: step 7: mpi allreduce #1 on rank 0 did not complete within 1.0 s" "$out" ||
    { cat "$out"; echo "mpi hang: no watchdog message"; exit 1; }
[ $took -le 15 ] || { echo "mpi hang: took $took s"; exit 1; }
echo "mpi hang: job aborted after ${took}s: $(grep 'kiln: step 7: mpi' "$out")"
