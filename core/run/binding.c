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

/* Rank i's neighbours: the ranks of its host whose CPUs intersect its own (i included), their
 * number into *k and the CPUs of their union returned (-1 when a list cannot be read or is too
 * large to count). */
static long neighbours(const struct mp_binding_rank *r, int n, int i, int *k)
{
    long a[MAX_RANGES][2], b[MAX_RANGES][2];
    int na = parse_list(r[i].cpus, a);
    *k = 0;
    if (na <= 0)
        return -1;
    long top = -1;
    for (int j = 0; j < n; j++) {
        int nb = strcmp(r[j].host, r[i].host) == 0 ? parse_list(r[j].cpus, b) : -1;
        for (int x = 0; nb > 0 && intersect(a, na, b, nb) && x < nb; x++)
            top = b[x][1] > top ? b[x][1] : top;
    }
    char *seen = top >= 0 && top < 1 << 20 ? calloc((size_t)top + 1, 1) : NULL;
    if (!seen)
        return -1;
    long cpus = 0;
    for (int j = 0; j < n; j++) {
        int nb = strcmp(r[j].host, r[i].host) == 0 ? parse_list(r[j].cpus, b) : -1;
        if (nb <= 0 || !intersect(a, na, b, nb))
            continue;
        (*k)++;
        for (int x = 0; x < nb; x++)
            for (long c = b[x][0]; c <= b[x][1]; c++) {
                cpus += !seen[c];
                seen[c] = 1;
            }
    }
    free(seen);
    return cpus;
}

int mp_binding_problem(const struct mp_binding_rank *r, int n, int helper_threads, char *why,
                       size_t len)
{
    why[0] = '\0';
    for (int i = 0; i < n; i++) {
        int k;
        long cpus = neighbours(r, n, i, &k);
        if (cpus > 0 && k > cpus) {
            snprintf(why, len, "%d ranks on %s share %ld CPU(s) (rank %d %s on %s): they take "
                     "turns on them, and every exchange waits for the scheduler; run at most "
                     "one rank per CPU, each bound to CPUs of its own (mpirun --map-by core "
                     "--bind-to core) or unbound (--bind-to none)",
                     k, r[i].host, cpus, i, r[i].bound == 1 ? "bound" : "running", r[i].cpus);
            return 1;
        }
    }
    long a[MAX_RANGES][2];
    for (int i = 0; i < n && helper_threads; i++) {
        int na = r[i].bound == 1 ? parse_list(r[i].cpus, a) : -1;
        if (na > 0 && count_cpus(a, na) == 1) {
            snprintf(why, len, "rank %d on %s is bound to one CPU (%s), which NCCL's proxy thread "
                     "shares with the rank: give each rank two or more (mpirun --map-by "
                     "slot:PE=2 --bind-to core, or srun --cpus-per-task)",
                     i, r[i].host, r[i].cpus);
            return 1;
        }
    }
    return 0;
}
