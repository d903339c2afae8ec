/* test_binding.c - mp_binding_problem: ranks bound to one core, more ranks than CPUs on a host,
 * one CPU per rank beside NCCL's proxy thread; and placements that share nothing or share with
 * room (ranks bound by NUMA node). */
#include <string.h>

#include "binding.h"
#include "check.h"

static int problem(const struct mp_binding_rank *r, int n, int helpers, char *why)
{
    return mp_binding_problem(r, n, helpers, why, 512);
}

int main(void)
{
    char why[512];
    /* one core each, apart; unbound ranks no more than CPUs; other hosts do not count */
    struct mp_binding_rank apart[] = {{"a", "0", 1}, {"a", "1", 1}, {"b", "0", 1}, {"b", "1", 1}};
    CHECK_INT(problem(apart, 4, 0, why), 0);
    CHECK_STR(why, "");
    struct mp_binding_rank loose[] = {{"a", "0-1", 0}, {"a", "0-1", 0}};
    CHECK_INT(problem(loose, 2, 0, why), 0);
    /* two ranks of one host bound to the same core; three bound to CPUs 0, 0-1 and 1 */
    struct mp_binding_rank twin[] = {{"a", "4-5", 1}, {"a", "2", 1}, {"a", "2", 1}};
    CHECK_INT(problem(twin, 3, 0, why), 1);
    CHECK(strstr(why, "2 ranks on a share 1 CPU(s) (rank 1 bound on 2)") != NULL);
    struct mp_binding_rank three[] = {{"a", "0", 1}, {"a", "0-1", 1}, {"a", "1", 1}};
    CHECK_INT(problem(three, 3, 0, why), 1);
    /* eight ranks bound by NUMA node, two nodes of 24 CPUs: they share, with room */
    struct mp_binding_rank numa[8];
    for (int i = 0; i < 8; i++)
        numa[i] = (struct mp_binding_rank){"n", i < 4 ? "0-23" : "24-47", 1};
    CHECK_INT(problem(numa, 8, 1, why), 0);
    /* the same CPU numbers on two hosts share nothing */
    struct mp_binding_rank hosts[] = {{"a", "0", 1}, {"b", "0", 1}};
    CHECK_INT(problem(hosts, 2, 0, why), 0);
    /* four unbound ranks on two CPUs */
    struct mp_binding_rank over[] = {{"h", "0-1", 0}, {"h", "0-1", 0}, {"h", "0-1", 0},
                                     {"h", "0-1", 0}};
    CHECK_INT(problem(over, 4, 0, why), 1);
    CHECK(strstr(why, "4 ranks on h share 2 CPU(s) (rank 0 running on 0-1)") != NULL);
    /* one CPU per rank: fine for MPI, not beside NCCL's proxy thread */
    CHECK_INT(problem(apart, 2, 0, why), 0);
    CHECK_INT(problem(apart, 2, 1, why), 1);
    CHECK(strstr(why, "rank 0 on a is bound to one CPU (0)") != NULL);
    /* unknown CPUs, and a list that is not one, are left out */
    struct mp_binding_rank unknown[] = {{"a", "", -1}, {"a", "", -1}, {"a", "x-1", 1},
                                        {"a", "x-1", 1}};
    CHECK_INT(problem(unknown, 4, 1, why), 0);
    return check_failures;
}
