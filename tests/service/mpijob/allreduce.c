/* tests/service/mpijob/allreduce.c - an MPI all-reduce as an MPIJob's
 * ranks run it, unmodified: each rank adds rank + 1 over MPI_COMM_WORLD and
 * prints the sum, the host the launcher's mpirun started it on
 * (KILN_MPI_HOST, set by kiln-mpi-agent) and its pid. Exits 1 when the sum
 * is wrong. With an argument N it then sleeps N seconds (a job to cancel). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank = 0, size = 0;
    long mine, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const char *host = getenv("KILN_MPI_HOST");
    printf("mpi rank %d of %d on %s pid %d: sum %ld\n", rank, size, host ? host : "?",
           (int)getpid(), sum);
    fflush(stdout);
    if (argc > 1) sleep((unsigned)atoi(argv[1]));
    MPI_Finalize();
    return sum == (long)size * (size + 1) / 2 ? 0 : 1;
}
