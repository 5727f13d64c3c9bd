#!/bin/sh
# mpi_local.sh MPIRUN RANK_PROGRAM - the MPI backend with 2 ranks on this host.
set -eu
mpirun=$1 prog=$2
# Running as root needs OpenMPI's explicit consent; --oversubscribe because
# CI machines may have fewer cores than ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec timeout 100 "$mpirun" --oversubscribe -np 2 --mca btl self,vader,tcp "$prog"
