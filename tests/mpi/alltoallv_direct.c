/* alltoallv_direct.c - the baseline moeperf-a2a is held against: a bare MPI_Alltoallv loop with the
 * same protocol (barrier, time one call on every rank, slowest rank counts, median over iterations).
 * Usage: alltoallv_direct BYTES_PER_PEER ITERS WARMUP; prints the median in µs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 4) {
        fprintf(stderr, "usage: %s BYTES_PER_PEER ITERS WARMUP\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int bytes = atoi(argv[1]), iters = atoi(argv[2]), warmup = atoi(argv[3]), rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char *send = malloc((size_t)bytes * n), *recv = malloc((size_t)bytes * n);
    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);
    double *t = malloc(sizeof(double) * iters), *tmax = malloc(sizeof(double) * iters);
    memset(send, 1, (size_t)bytes * n);
    memset(recv, 0, (size_t)bytes * n);
    for (int p = 0; p < n; p++) {
        counts[p] = bytes;
        displs[p] = bytes * p;
    }
    for (int i = 0; i < warmup + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Alltoallv(send, counts, displs, MPI_BYTE, recv, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        if (i >= warmup)
            t[i - warmup] = (t1 - t0) * 1e6;
    }
    MPI_Reduce(t, tmax, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(tmax, (size_t)iters, sizeof *tmax, by_value);
        printf("%.3f\n", tmax[(iters + 1) / 2 - 1]); /* nearest-rank median, as moeperf */
    }
    free(send); free(recv); free(counts); free(displs); free(t); free(tmax);
    MPI_Finalize();
    return 0;
}
