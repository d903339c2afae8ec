/* rankmap.h - which local rank a process is on its host (launcher variables checked against MPI's
 * shared-memory split) and which GPU that local rank takes. */
#ifndef MP_RANKMAP_H
#define MP_RANKMAP_H

struct mp_comm;

/* The launcher variables that carry a process's index among the ranks of its host, in the order
 * they are believed: OMPI_COMM_WORLD_LOCAL_RANK (mpirun sets it afresh even inside a Slurm step,
 * whose SLURM_LOCALID it inherits), SLURM_LOCALID (srun), MPI_LOCALRANKID (MPICH and Intel MPI's
 * Hydra), MV2_COMM_WORLD_LOCAL_RANK (MVAPICH2), PMI_LOCAL_RANK (PMI launchers such as Cray PALS).
 * NULL-terminated. */
extern const char *const mp_local_rank_vars[];

/* This process's local rank from the first variable of mp_local_rank_vars that is set: its value
 * (>= 0), or -1 when none is set or the one set is not a non-negative integer. *var names the
 * variable read (NULL when none is set). */
int mp_local_rank_env(const char **var);

/* Whether the launcher's numbering can be used for a world of `size` ranks: env[r] is rank r's
 * value from mp_local_rank_env (-1: none), split[r] its index in MPI's shared-memory split and
 * node_of[r] its host. Returns 1 when every rank has a value and each host's values are 0..n-1
 * once each (n: the host's rank count), else 0. *differ counts the ranks whose launcher value is
 * not their split value (an absent or invalid value counts only when another rank has one). */
int mp_local_ranks_usable(int size, const int *env, const int *split, const int *node_of,
                          int *differ);

/* Settle c->local_rank across the world (a collective): the launcher's numbering when it is
 * usable (mp_local_ranks_usable), MPI's shared-memory split (what c->local_rank holds on entry)
 * otherwise. When the two disagree, rank 0 warns once and names the one used. *source is the
 * variable used, or "shared-memory split". Returns MP_OK or a comm error. */
int mp_local_rank_resolve(struct mp_comm *c, const char **source);

#endif
