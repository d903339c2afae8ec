/* test_rankmap.c - local rank from launcher variables, the launcher-vs-split rule, GPU index. */
#include <stdlib.h>

#include "check.h"
#include "compute.h" /* mp_gpu_index */
#include "rankmap.h"

static void clear_env(void)
{
    for (int i = 0; mp_local_rank_vars[i]; i++)
        unsetenv(mp_local_rank_vars[i]);
}

static void test_env(void)
{
    const char *var = "unset";
    clear_env();
    CHECK_INT(mp_local_rank_env(&var), -1);
    CHECK(var == NULL);

    setenv("SLURM_LOCALID", "3", 1);
    CHECK_INT(mp_local_rank_env(&var), 3);
    CHECK(var && strcmp(var, "SLURM_LOCALID") == 0);

    /* mpirun's own variable wins over a Slurm step's inherited one */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    CHECK_INT(mp_local_rank_env(&var), 1);
    CHECK(var && strcmp(var, "OMPI_COMM_WORLD_LOCAL_RANK") == 0);

    /* a garbled first variable is not replaced by the next one: it is reported invalid */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1x", 1);
    CHECK_INT(mp_local_rank_env(&var), -1);
    CHECK(var && strcmp(var, "OMPI_COMM_WORLD_LOCAL_RANK") == 0);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "-2", 1);
    CHECK_INT(mp_local_rank_env(&var), -1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "", 1);
    CHECK_INT(mp_local_rank_env(&var), -1);

    clear_env();
    setenv("MPI_LOCALRANKID", "0", 1);
    CHECK_INT(mp_local_rank_env(&var), 0);
    CHECK(var && strcmp(var, "MPI_LOCALRANKID") == 0);
    clear_env();
    /* MVAPICH2's and the PMI launchers' variables, after the others */
    setenv("PMI_LOCAL_RANK", "5", 1);
    CHECK_INT(mp_local_rank_env(&var), 5);
    CHECK(var && strcmp(var, "PMI_LOCAL_RANK") == 0);
    setenv("MV2_COMM_WORLD_LOCAL_RANK", "2", 1);
    CHECK_INT(mp_local_rank_env(&var), 2);
    CHECK(var && strcmp(var, "MV2_COMM_WORLD_LOCAL_RANK") == 0);
    clear_env();
}

static void test_usable(void)
{
    /* two hosts of two ranks, packed: split numbers 0,1,0,1 */
    int node_of[] = {0, 0, 1, 1};
    int split[] = {0, 1, 0, 1};
    int differ = -1;

    int none[] = {-1, -1, -1, -1};
    CHECK_INT(mp_local_ranks_usable(4, none, split, node_of, &differ), 0);
    CHECK_INT(differ, 0);

    int same[] = {0, 1, 0, 1};
    CHECK_INT(mp_local_ranks_usable(4, same, split, node_of, &differ), 1);
    CHECK_INT(differ, 0);

    /* the launcher numbered host 1 the other way round: still a valid numbering, used */
    int swapped[] = {0, 1, 1, 0};
    CHECK_INT(mp_local_ranks_usable(4, swapped, split, node_of, &differ), 1);
    CHECK_INT(differ, 2);

    /* a value inherited by every rank (a stale SLURM_LOCALID): two ranks of a host alike */
    int stale[] = {3, 3, 3, 3};
    CHECK_INT(mp_local_ranks_usable(4, stale, split, node_of, &differ), 0);
    CHECK_INT(differ, 4);

    /* duplicates within a host */
    int dup[] = {0, 0, 0, 1};
    CHECK_INT(mp_local_ranks_usable(4, dup, split, node_of, &differ), 0);
    CHECK_INT(differ, 1);

    /* out of range for the host's rank count */
    int high[] = {0, 2, 0, 1};
    CHECK_INT(mp_local_ranks_usable(4, high, split, node_of, &differ), 0);
    CHECK_INT(differ, 1);

    /* only some ranks have a value */
    int partial[] = {0, 1, -1, -1};
    CHECK_INT(mp_local_ranks_usable(4, partial, split, node_of, &differ), 0);
    CHECK_INT(differ, 2);

    /* cyclic mapping: ranks 0,2 on host 0 and 1,3 on host 1 */
    int cyc_node[] = {0, 1, 0, 1};
    int cyc_split[] = {0, 0, 1, 1};
    int cyc_env[] = {0, 0, 1, 1};
    CHECK_INT(mp_local_ranks_usable(4, cyc_env, cyc_split, cyc_node, &differ), 1);
    CHECK_INT(differ, 0);

    /* a single process with a value left from an outer launch */
    int one_node[] = {0}, one_split[] = {0}, one_env[] = {5};
    CHECK_INT(mp_local_ranks_usable(1, one_env, one_split, one_node, &differ), 0);
    CHECK_INT(differ, 1);
}

static void test_gpu_index(void)
{
    CHECK_INT(mp_gpu_index(0, 8), 0);
    CHECK_INT(mp_gpu_index(7, 8), 7);
    CHECK_INT(mp_gpu_index(9, 8), 1); /* more ranks than GPUs: they share in turn */
    CHECK_INT(mp_gpu_index(3, 1), 0);
    CHECK_INT(mp_gpu_index(0, 0), -1);
    CHECK_INT(mp_gpu_index(-1, 4), -1);
}

int main(void)
{
    test_env();
    test_usable();
    test_gpu_index();
    return check_failures;
}
