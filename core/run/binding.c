/* binding.c - whether the ranks of a run share CPUs (see binding.h). */
#include "binding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANGES 64

/* An hwloc list string ("0-3,8,10-11") into ranges r[i][0..1], at most MAX_RANGES; returns how
 * many, or -1 when the text is not such a list. */
static int parse_list(const char *s, long r[][2])
{
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0 || n == MAX_RANGES)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a)
                return -1;
            s = end;
        }
        r[n][0] = a;
        r[n][1] = b;
        n++;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

static long count_cpus(long r[][2], int n)
{
    long c = 0;
    for (int i = 0; i < n; i++)
        c += r[i][1] - r[i][0] + 1;
    return c;
}

/* Whether two lists of ranges share a CPU. */
static int intersect(long a[][2], int na, long b[][2], int nb)
{
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i][0] <= b[j][1] && b[j][0] <= a[i][1])
                return 1;
    return 0;
}

/* A rank's CPUs parsed: its ranges (n < 0: unknown or unreadable). */
struct cpus {
    int n;
    long r[MAX_RANGES][2];
};

/* Rank i's neighbours: the ranks of its host whose CPUs intersect its own (i included), their
 * number into *k and the CPUs of their union returned (-1 when rank i's CPUs are unknown), counted
 * in seen[0..top] (zeroed here). */
static long neighbours(const struct mp_binding_rank *r, struct cpus *c, int n, int i, char *seen,
                       long top, int *k)
{
    *k = 0;
    if (c[i].n <= 0)
        return -1;
    memset(seen, 0, (size_t)top + 1);
    long cpus = 0;
    for (int j = 0; j < n; j++) {
        if (c[j].n <= 0 || strcmp(r[j].host, r[i].host) != 0 ||
            !intersect(c[i].r, c[i].n, c[j].r, c[j].n))
            continue;
        (*k)++;
        for (int x = 0; x < c[j].n; x++)
            for (long v = c[j].r[x][0]; v <= c[j].r[x][1]; v++) {
                cpus += !seen[v];
                seen[v] = 1;
            }
    }
    return cpus;
}

/* The first problem of ranks r[0..n) with their CPUs parsed in c (mp_binding_problem). */
static int first_problem(const struct mp_binding_rank *r, struct cpus *c, int n, char *seen,
                         long top, int helper_threads, char *why, size_t len)
{
    for (int i = 0; i < n && seen; i++) {
        int k;
        long cpus = neighbours(r, c, n, i, seen, top, &k);
        if (cpus > 0 && k > cpus) {
            snprintf(why, len, "%d ranks on %s share %ld CPU(s) (rank %d %s on %s): they take "
                     "turns on them, and every exchange waits for the scheduler; run at most "
                     "one rank per CPU, each bound to CPUs of its own (mpirun --map-by core "
                     "--bind-to core) or unbound (--bind-to none)",
                     k, r[i].host, cpus, i, r[i].bound == 1 ? "bound" : "running", r[i].cpus);
            return 1;
        }
    }
    for (int i = 0; i < n && helper_threads; i++)
        if (r[i].bound == 1 && c[i].n > 0 && count_cpus(c[i].r, c[i].n) == 1) {
            snprintf(why, len, "rank %d on %s is bound to one CPU (%s), which NCCL's proxy thread "
                     "shares with the rank: give each rank two or more (mpirun --map-by "
                     "slot:PE=2 --bind-to core, or srun --cpus-per-task)",
                     i, r[i].host, r[i].cpus);
            return 1;
        }
    return 0;
}

int mp_binding_problem(const struct mp_binding_rank *r, int n, int helper_threads, char *why,
                       size_t len)
{
    why[0] = '\0';
    struct cpus *c = calloc((size_t)(n > 0 ? n : 1), sizeof *c);
    if (!c)
        return 0; /* a check that cannot run finds nothing */
    long top = -1; /* each list parsed once; the largest CPU index bounds the union's count */
    for (int i = 0; i < n; i++) {
        c[i].n = parse_list(r[i].cpus, c[i].r);
        for (int x = 0; x < c[i].n; x++)
            top = c[i].r[x][1] > top ? c[i].r[x][1] : top;
    }
    char *seen = top >= 0 && top < 1 << 20 ? malloc((size_t)top + 1) : NULL;
    int found = first_problem(r, c, n, seen, top, helper_threads, why, len);
    free(seen);
    free(c);
    return found;
}
