/* nccl_check.c - what the CPU stand-in's NCCL refuses as NCCL does, called directly under mpirun
 * (tests/integration/gpu_faults.sh): `duplicate` builds the world communicator with every rank on
 * device 0 (it must fail with ncclInvalidUsage on each rank unless each has its own NCCL_HOSTID,
 * then it must work); `after-abort` uses a communicator after ncclCommAbort freed it (the stand-in
 * must stop the process). Prints one line per rank; exit 0 when the call returned what was
 * expected. */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cudaSetDevice(0);
    ncclUniqueId id;
    if (rank == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    int ok = 0;
    if (strcmp(mode, "duplicate") == 0) {
        const char *hostid = getenv("NCCL_HOSTID");
        ncclResult_t want = hostid && *hostid ? ncclSuccess : ncclInvalidUsage;
        ok = r == want;
        printf("rank %d: ncclCommInitRank on device 0 (NCCL_HOSTID %s): %s\n", rank,
               hostid ? hostid : "unset", ncclGetErrorString(r));
        if (r == ncclSuccess)
            ncclCommDestroy(comm);
    } else if (strcmp(mode, "after-abort") == 0 && r == ncclSuccess) {
        ncclCommAbort(comm);
        ncclResult_t async;
        ncclCommGetAsyncError(comm, &async); /* the stand-in must stop here */
        printf("rank %d: a communicator was used after ncclCommAbort\n", rank);
    } else {
        printf("usage: nccl_check duplicate|after-abort (ncclCommInitRank: %s)\n",
               ncclGetErrorString(r));
    }
    fflush(stdout);
    MPI_Finalize();
    return ok ? 0 : 1;
}
