/* memguard.c - the collective memory check (see memguard.h). */
#include "memguard.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "topo.h"

double mp_rank_memory_budget(const struct mp_compute_ops *ops, struct mp_compute *dev,
                             long long max_memory, int local_size, double *free_bytes,
                             const char **source)
{
    *free_bytes = -1;
    size_t avail = 0, total = 0;
    if (ops && ops->mem_info && dev && ops->mem_info(dev, &avail, &total) == MP_OK)
        *free_bytes = (double)avail;
    else if (!ops || !ops->mem_info) {
        long long host = mp_mem_available();
        *free_bytes = host > 0 ? (double)host : -1;
    }
    if (max_memory > 0) {
        *source = "--max-memory";
        return (double)max_memory;
    }
    if (ops && ops->mem_info) {
        *source = "90% of its free GPU memory";
        return *free_bytes >= 0 ? 0.9 * *free_bytes : -1;
    }
    *source = "90% of the host's free memory / ranks per host";
    return mp_memory_budget(0, local_size);
}

/* One rank's report, gathered to rank 0 when some rank's need exceeds its budget. */
struct report {
    double need, free_bytes, budget, ratio;
    char host[64];
};

int mp_memory_agree(struct mp_comm *c, const struct mp_compute_ops *ops, struct mp_compute *dev,
                    long long max_memory, double need, struct mp_mem_verdict *v)
{
    struct report mine = {.need = need};
    const char *source;
    mine.budget = mp_rank_memory_budget(ops, dev, max_memory, c->local_size, &mine.free_bytes,
                                        &source);
    mine.ratio = mine.budget > 0 ? need / mine.budget : 0;
    memset(v, 0, sizeof *v);
    v->source = source;
    v->rank = -1;
    double worst = mine.ratio;
    int rc = c->ops->max_double(c, &worst);
    if (rc != MP_OK)
        return -rc;
    if (worst <= 1)
        return 1;
    gethostname(mine.host, sizeof mine.host - 1);
    struct report *all = c->rank == 0 ? calloc((size_t)c->size, sizeof *all) : NULL;
    if (c->rank == 0 && !all) {
        mp_error("out of memory");
        return -MP_ERR_RUNTIME;
    }
    rc = c->ops->gather(c, &mine, sizeof mine, all);
    if (rc != MP_OK) {
        free(all);
        return -rc;
    }
    if (c->rank == 0) {
        int w = 0;
        for (int r = 1; r < c->size; r++)
            if (all[r].ratio > all[w].ratio)
                w = r;
        v->need = all[w].need;
        v->free_bytes = all[w].free_bytes;
        v->budget = all[w].budget;
        v->rank = w;
        memcpy(v->host, all[w].host, sizeof v->host);
        v->host[sizeof v->host - 1] = 0;
    }
    free(all);
    return 0;
}
