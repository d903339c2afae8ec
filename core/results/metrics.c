/* metrics.c - the layer metrics of docs/METRICS.md ("Per-iteration metrics"), per iteration. */
#include "metrics.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

const char *const mp_iter_metric_names[MP_ITER_METRICS] = {
    "layer_us",        "ffn_us",       "ffn_mean_us",     "comm_us",
    "route_us",        "notify_us",    "dispatch_us",     "tp_reduce_us",
    "combine_us",      "comm_comp_ratio", "bubble_ratio", "wait_ratio", "load_imbalance",
    "local_hit_rate",  "bytes_rank_max",  "bytes_internode", "bytes_intranode",
    "dispatch_bytes_intranode", "dispatch_bytes_internode", "combine_bytes_intranode",
    "combine_bytes_internode",  "drop_rate",
    "dispatch_intranode_GBps",  "dispatch_internode_GBps",  "combine_intranode_GBps",
    "combine_internode_GBps",
    "dispatch_inter_us",        "dispatch_intra_us",        "combine_inter_us",
    "combine_intra_us",         "cache_hit_rate",           "fetch_bytes",
    "fetch_us",
};

static double max2(double a, double b) { return a > b ? a : b; }

double mp_rank_layer_us(const struct mp_rank_iter *r)
{
    return r->route + r->notify + r->dispatch + r->ffn + r->tp_reduce + r->combine;
}

/* Achieved bandwidth in GB/s of `bytes` moved in `us` µs (bytes / µs / 1e3), as moeperf-a2a's
 * algbw (docs/METRICS.md); NAN when the class carries nothing in the phase (`total` 0) or the
 * phase took no time. */
static double link_GBps(double bytes, double us, double total)
{
    return total > 0 && us > 0 ? bytes / us / 1e3 : NAN;
}

/* Rank r's four phases (0 notify, 1 dispatch, 2 TP reduce, 3 combine) into p[2·ph] (where the
 * phase starts: its own earlier phases summed, from the iteration's aligned start) and p[2·ph + 1]
 * (how long it lasted). */
static void phases_of(const struct mp_rank_iter *r, double p[2 * MP_WAIT_PHASES])
{
    double s = r->route;
    p[0] = s;
    p[1] = r->notify;
    s += r->notify;
    p[2] = s;
    p[3] = r->dispatch;
    s += r->dispatch + r->ffn;
    p[4] = s;
    p[5] = r->tp_reduce;
    p[6] = s + r->tp_reduce;
    p[7] = r->combine;
}

/* The waits in the collectives (docs/METRICS.md, "wait_ratio"): in each of the EP group's exchanges
 * (notify, dispatch, combine: the ranks of one tp_rank) and the TP group's reduce (the tp ranks of
 * one ep_rank), a rank that starts before the last of its group waits until that one starts, at
 * most as long as its phase lasted. Adds rank i's wait in phase ph to w[i * 4 + ph] when `w` is
 * given; returns the sum over ranks and phases (NAN when tp does not divide n, or out of memory). */
static double collective_wait(const struct mp_rank_iter *r, int n, int tp, double *w)
{
    double wait = 0;
    if (tp < 1 || n % tp)
        return NAN;
    /* every rank's phases first, in one pass over the records: the groups below read them by
     * stride, which over the records themselves would touch a cache line per value */
    double *ph_at = malloc((size_t)(n > 0 ? n : 1) * 2 * MP_WAIT_PHASES * sizeof *ph_at);
    if (!ph_at)
        return NAN;
    for (int i = 0; i < n; i++)
        phases_of(&r[i], ph_at + (size_t)i * 2 * MP_WAIT_PHASES);
    for (int ph = 0; ph < MP_WAIT_PHASES; ph++) {
        int ep_phase = ph != 2;
        /* a group: stride tp from its first rank (EP) or tp consecutive ranks (TP) */
        int groups = ep_phase ? tp : n / tp, size = ep_phase ? n / tp : tp;
        for (int g = 0; g < groups; g++) {
            int first = ep_phase ? g : g * tp, step = ep_phase ? tp : 1;
            const double *p = ph_at + (size_t)first * 2 * MP_WAIT_PHASES + 2 * ph;
            size_t stride = (size_t)step * 2 * MP_WAIT_PHASES;
            double last = 0;
            for (int k = 0; k < size; k++) {
                double s = p[k * stride];
                last = k == 0 || s > last ? s : last;
            }
            for (int k = 0; k < size; k++) {
                double x = last - p[k * stride], len = p[k * stride + 1];
                x = x < 0 ? 0 : x > len ? len : x;
                wait += x;
                if (w)
                    w[(first + k * step) * MP_WAIT_PHASES + ph] = x;
            }
        }
    }
    free(ph_at);
    return wait;
}

int mp_metrics_rank_waits(const struct mp_rank_iter *r, int n, int tp, double *w)
{
    for (int i = 0; i < n * MP_WAIT_PHASES; i++)
        w[i] = 0;
    return isnan(collective_wait(r, n, tp, w)) ? -1 : 0;
}

void mp_metrics_iter(const struct mp_rank_iter *r, int n, int tp, struct mp_iter_metrics *m)
{
    struct mp_iter_metrics z = {0};
    double ffn_sum = 0, rows_sum = 0, rows_max = 0, pairs = 0, local = 0, dropped = 0;
    double hits = 0, accesses = 0;
    int slow_d = 0, slow_c = 0; /* the slowest rank of the dispatch and of the combine */
    for (int i = 0; i < n; i++) {
        z.layer_us = max2(z.layer_us, mp_rank_layer_us(&r[i]));
        z.ffn_us = max2(z.ffn_us, r[i].ffn);
        z.route_us = max2(z.route_us, r[i].route);
        z.notify_us = max2(z.notify_us, r[i].notify);
        z.dispatch_us = max2(z.dispatch_us, r[i].dispatch);
        z.tp_reduce_us = max2(z.tp_reduce_us, r[i].tp_reduce);
        z.combine_us = max2(z.combine_us, r[i].combine);
        slow_d = r[i].dispatch > r[slow_d].dispatch ? i : slow_d;
        slow_c = r[i].combine > r[slow_c].combine ? i : slow_c;
        z.bytes_rank_max = max2(z.bytes_rank_max, r[i].bytes_sent);
        z.dispatch_bytes_intranode += r[i].dispatch_intra;
        z.dispatch_bytes_internode += r[i].dispatch_inter;
        z.combine_bytes_intranode += r[i].combine_intra;
        z.combine_bytes_internode += r[i].combine_inter;
        ffn_sum += r[i].ffn;
        rows_sum += r[i].rows;
        rows_max = max2(rows_max, r[i].rows);
        pairs += r[i].pairs;
        local += r[i].local_pairs;
        dropped += r[i].dropped;
        hits += r[i].cache_hits;
        accesses += r[i].cache_hits + r[i].cache_misses;
        z.fetch_bytes += r[i].fetch_bytes;
        z.fetch_us = max2(z.fetch_us, r[i].fetch_us);
    }
    z.cache_hit_rate = accesses > 0 ? hits / accesses : NAN;
    z.ffn_mean_us = n ? ffn_sum / n : 0;
    z.comm_us = z.layer_us - z.ffn_us - z.route_us;
    z.comm_comp_ratio = z.ffn_us > 0 ? z.comm_us / z.ffn_us : 0;
    double idle = 0;
    for (int i = 0; i < n; i++)
        idle += z.ffn_us - r[i].ffn;
    z.bubble_ratio = z.layer_us > 0 && n ? idle / (n * z.layer_us) : 0;
    z.wait_ratio = z.layer_us > 0 && n ? collective_wait(r, n, tp, NULL) / (n * z.layer_us) : 0;
    z.load_imbalance = rows_sum > 0 ? rows_max / (rows_sum / n) : 1.0;
    z.local_hit_rate = pairs > 0 ? local / pairs : 0;
    z.drop_rate = pairs > 0 ? dropped / pairs : 0;
    z.bytes_internode = z.dispatch_bytes_internode + z.combine_bytes_internode;
    z.bytes_intranode = z.dispatch_bytes_intranode + z.combine_bytes_intranode;
    if (n > 0) {
        const struct mp_rank_iter *d = &r[slow_d], *c = &r[slow_c];
        z.dispatch_intranode_GBps = link_GBps(d->dispatch_intra, d->dispatch,
                                              z.dispatch_bytes_intranode);
        z.dispatch_internode_GBps = link_GBps(d->dispatch_inter, d->dispatch,
                                              z.dispatch_bytes_internode);
        z.combine_intranode_GBps = link_GBps(c->combine_intra, c->combine,
                                             z.combine_bytes_intranode);
        z.combine_internode_GBps = link_GBps(c->combine_inter, c->combine,
                                             z.combine_bytes_internode);
        z.dispatch_inter_us = d->dispatch_inter_us;
        z.dispatch_intra_us = d->dispatch_intra_us;
        z.combine_inter_us = c->combine_inter_us;
        z.combine_intra_us = c->combine_intra_us;
    } else {
        z.dispatch_inter_us = z.dispatch_intra_us = z.combine_inter_us = z.combine_intra_us = NAN;
        mp_metrics_pipelined(&z); /* no rank: no bandwidth */
    }
    *m = z;
}

void mp_metrics_pipelined(struct mp_iter_metrics *m)
{
    m->dispatch_intranode_GBps = m->dispatch_internode_GBps = NAN;
    m->combine_intranode_GBps = m->combine_internode_GBps = NAN;
}

/* The median over `n` iterations of the field at `offset`, less route_us when `minus_route`. */
static double median_field(const struct mp_iter_metrics *m, int n, size_t offset, int minus_route)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v)
        return NAN;
    for (int i = 0; i < n; i++)
        v[i] = *(const double *)((const char *)&m[i] + offset) - (minus_route ? m[i].route_us : 0);
    double median = mp_percentile_select(v, n, 50);
    free(v);
    return median;
}

double mp_overlap_efficiency(const struct mp_iter_metrics *plain,
                             const struct mp_iter_metrics *ovl, int n)
{
    double comm = median_field(plain, n, offsetof(struct mp_iter_metrics, comm_us), 0);
    double comp = median_field(plain, n, offsetof(struct mp_iter_metrics, ffn_us), 0);
    double both = median_field(ovl, n, offsetof(struct mp_iter_metrics, layer_us), 1);
    double lo = comm < comp ? comm : comp;
    return lo > 0 ? (comm + comp - both) / lo : NAN;
}
