/* report_findings.c - moeperf-report's findings: pure functions of the medians, grouped by the
 * question each answers (report_findings.h, docs/plots.md). */
#include "report_findings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "schema.h"
#include "stats.h"


/* ---- findings ---- */


/* The findings of one curve as table cells. */
static void cap_cell(char *out, const struct rp_cap *c)
{
    char a[CELL], b[CELL], st[CELL], lead[CELL] = "";
    batch_text(a, c->cap);
    batch_text(b, c->next);
    batch_text(st, c->start);
    if (c->leading && c->kind != RP_CAP_NETWORK)
        snprintf(lead, CELL, "; above 1 below batch %.40s", st);
    char text[1024]; /* room for any number; cut to a cell below */
    switch (c->kind) {
    case RP_CAP_FOUND:
        snprintf(text, sizeof text, "%s (ratio %.2f; %.2f at batch %s, crosses 1 near batch %.0f%s)",
                 a, c->cap_ratio, c->next_ratio, b, c->cross, lead);
        break;
    case RP_CAP_NOT_REACHED:
        snprintf(text, sizeof text, "beyond %s (ratio at most %.3g%s)", a, c->max_compute, lead);
        break;
    case RP_CAP_NETWORK:
        batch_text(b, c->max_ratio_at);
        snprintf(text, sizeof text, "none: above 1 at every batch (up to %.2f at batch %s)",
                 c->max_ratio, b);
        break;
    default:
        snprintf(text, sizeof text, "–");
    }
    snprintf(out, CELL, "%.190s", text);
}

static void knee_cell(char *out, const struct rp_knee *k, double last)
{
    char a[CELL], b[CELL];
    if (k->found) {
        batch_text(a, k->batch);
        batch_text(b, k->to);
        snprintf(out, CELL, "%.40s (slope %.2f up to batch %.40s)", a, k->slope, b);
    } else if (!isnan(k->max_slope)) {
        batch_text(a, last);
        snprintf(out, CELL, "none up to %.40s (steepest slope %.2f)", a, k->max_slope);
    } else {
        snprintf(out, CELL, "–");
    }
}

static void bubble_cells(char *max, char *last, const struct rp_bubble *b)
{
    char p[CELL], at[CELL];
    f_pct(p, b->max);
    batch_text(at, b->max_at);
    if (isnan(b->max))
        snprintf(max, CELL, "–");
    else
        snprintf(max, CELL, "%.40s at batch %.40s", p, at);
    f_pct(p, b->last);
    batch_text(at, b->last_at);
    if (isnan(b->last))
        snprintf(last, CELL, "–");
    else
        snprintf(last, CELL, "%.40s at batch %.40s", p, at);
}

static void effect_text(char *out, size_t size, const struct rp_effect *e, const char *what)
{
    char at[CELL], bb[CELL], ba[CELL];
    batch_text(at, e->at);
    f_pct(bb, e->bubble_base);
    f_pct(ba, e->bubble_alt);
    char verdict[256];
    if (!e->faster && !e->slower)
        snprintf(verdict, sizeof verdict, "at no batch apart beyond the 95 %% confidence intervals "
                                          "of the medians");
    else
        snprintf(verdict, sizeof verdict, "faster at %d and slower at %d of the %d batches "
                                          "(95 %% confidence intervals of the medians apart)",
                 e->faster, e->slower, e->n);
    char imb[160] = "";
    if (!isnan(e->imbalance_base) && !isnan(e->imbalance_alt))
        snprintf(imb, sizeof imb, ", load imbalance %.2f → %.2f", e->imbalance_base,
                 e->imbalance_alt);
    /* one run of each: its points' own scatter bounds what it can tell (METRICS.md, Stability) */
    char noise[256] = "";
    if (!isnan(e->spread) && mp_apart(e->geomean) <= e->spread)
        snprintf(noise, sizeof noise, "; within the points' spread (up to %.0f %%): one run of "
                 "each cannot tell this from noise", 100 * e->spread);
    else if (!isnan(e->spread) && e->spread > MP_NOISY_SPREAD)
        snprintf(noise, sizeof noise, "; the points scatter by up to %.0f %% (spread): repeat "
                 "the runs before acting on it", 100 * e->spread);
    snprintf(out, size,
             "%s: layer latency ×%.2f (geometric mean over %d batches, ×%.2f to ×%.2f), %s; at "
             "batch %s ×%.2f, bubble %s → %s%s%s",
             what, e->geomean, e->n, e->min_ratio, e->max_ratio, verdict, at, e->ratio_at, bb,
             ba, imb, noise);
}

/* A curve's columns as arrays, for the findings functions. */
struct cols {
    int n;
    double *batch, *lat, *ratio, *bubble;
};

static void cols_free(struct cols *c)
{
    free(c->batch);
    free(c->lat);
    free(c->ratio);
    free(c->bubble);
}

static int cols_of(const struct rp_series *s, struct cols *c)
{
    size_t n = (size_t)s->n + 1;
    c->n = s->n;
    c->batch = calloc(n, sizeof *c->batch);
    c->lat = calloc(n, sizeof *c->lat);
    c->ratio = calloc(n, sizeof *c->ratio);
    c->bubble = calloc(n, sizeof *c->bubble);
    if (!c->batch || !c->lat || !c->ratio || !c->bubble) {
        cols_free(c);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < s->n; i++) {
        c->batch[i] = s->pt[i].batch;
        c->lat[i] = s->pt[i].layer_us;
        c->ratio[i] = s->pt[i].ratio;
        c->bubble[i] = s->pt[i].bubble;
    }
    return MP_OK;
}

/* The batch cap over all measured curves, in one sentence. */
static void headline(struct doc *d, const struct rp_series *s, int ns, const struct rp_cap *caps)
{
    int nm = 0, found = 0, network = 0, leading = 0, lo = -1, hi = -1;
    double maxc = NAN, last = NAN;
    for (int i = 0; i < ns; i++) {
        if (strcmp(s[i].key[RP_K_SOURCE], "measured") != 0 || caps[i].kind == RP_CAP_NO_DATA)
            continue;
        nm++;
        if (caps[i].kind == RP_CAP_NETWORK) {
            network++;
            continue;
        }
        leading += caps[i].leading > 0;
        if (isnan(maxc) || caps[i].max_compute > maxc)
            maxc = caps[i].max_compute;
        if (s[i].n && (isnan(last) || s[i].pt[s[i].n - 1].batch > last))
            last = s[i].pt[s[i].n - 1].batch;
        if (caps[i].kind != RP_CAP_FOUND)
            continue;
        found++;
        if (lo < 0 || caps[i].cap < caps[lo].cap)
            lo = i;
        if (hi < 0 || caps[i].cap > caps[hi].cap)
            hi = i;
    }
    if (!nm)
        return;
    char a[CELL], b[CELL], small[CELL] = "";
    if (leading == nm)
        snprintf(small, CELL, " All of them are above 1 at their smallest batches, where the fixed "
                              "cost of each message outweighs the little compute.");
    else if (leading)
        snprintf(small, CELL, " %d of the %d are above 1 at their smallest batches, where the "
                              "fixed cost of each message outweighs the little compute.",
                 leading, nm);
    if (found) {
        batch_text(a, caps[lo].cap);
        batch_text(b, caps[hi].cap);
        doc_li(d, "At a glance",
               "%d of %d measured curves go above comm_comp_ratio 1 as the batch grows; the "
               "smallest batch cap is %s (%s), the largest %s (%s). Keep the serving batch at or "
               "below the cap of the configuration you run, or add network bandwidth or "
               "locality.%s",
               found, nm, a, s[lo].label, b, s[hi].label, small);
    } else if (network == nm) {
        doc_li(d, "At a glance",
               "every measured curve is network-bound at every batch (comm_comp_ratio above 1): "
               "the All-to-All, not the experts, sets the latency; look at the layout (fewer EP "
               "ranks per node boundary) and at the network before the batch.");
    } else {
        batch_text(a, last);
        doc_li(d, "At a glance",
               "once compute-bound, no measured curve goes above comm_comp_ratio 1 again (at most "
               "%.3g up to batch %s): the batch cap lies beyond the sweep, and the expert FFN sets "
               "the latency at large batches.%s",
               maxc, a, small);
    }
}

/* The findings' table: one row per curve (batch cap, knee, bubbles), then the reference; frees
 * nothing of `caps`. MP_OK or MP_ERR_RUNTIME (out of memory). */
static int findings_table(struct doc *d, struct rp_series *s, int ns, const struct reference *ref,
                          const struct rp_cap *caps)
{
    /* one row per curve, and the reference for comparison */
    static const char *const fhead[] = {"curve", "batch cap", "knee", "largest bubble",
                                        "bubble at the largest batch"};
    char cells[5][CELL];
    doc_table(d, 2);
    for (int c = 0; c < 5; c++)
        snprintf(cells[c], CELL, "%s", fhead[c]);
    doc_row(d, 5, cells, 1);
    for (int i = 0; i < ns; i++) {
        struct cols c;
        if (cols_of(&s[i], &c) != MP_OK)
            return MP_ERR_RUNTIME;
        struct rp_knee k = rp_knee(c.batch, c.lat, c.n, KNEE_SLOPE);
        struct rp_bubble bb = rp_bubble_summary(c.batch, c.bubble, c.n);
        snprintf(cells[0], CELL, "%.190s", s[i].label);
        cap_cell(cells[1], &caps[i]);
        knee_cell(cells[2], &k, c.n ? c.batch[c.n - 1] : NAN);
        bubble_cells(cells[3], cells[4], &bb);
        doc_row(d, 5, cells, 0);
        cols_free(&c);
    }
    if (ref) {
        struct rp_cap c = rp_batch_cap(ref->batch, ref->ratio, ref->n);
        struct rp_knee k = rp_knee(ref->batch, ref->lat, ref->n, KNEE_SLOPE);
        struct rp_bubble bb = rp_bubble_summary(ref->batch, ref->bubble, ref->n);
        snprintf(cells[0], CELL, "%.190s", ref->label);
        cap_cell(cells[1], &c);
        knee_cell(cells[2], &k, ref->n ? ref->batch[ref->n - 1] : NAN);
        size_t kl = strlen(cells[2]);
        if (kl > 0 && cells[2][kl - 1] == ')') /* the published table has no layer_us column */
            snprintf(cells[2] + kl - 1, CELL - kl + 1, "; latency = %s)",
                     mp_table_col(&ref->t, MPC_layer_us) >= 0 ? "layer_us" : "ffn_us + comm_us");
        bubble_cells(cells[3], cells[4], &bb);
        doc_row(d, 5, cells, 0);
    }
    doc_table(d, 0);
    return MP_OK;
}

/* `alt` against `base` where they differ only in key `k`: the comparison in words ("ALT instead of
 * BASE: …", effect_text) into text. 1 when they form such a pair with common batches, else 0. */
static int pair_effect(const struct rp_series *base, const struct rp_series *alt, int k,
                       char *text, size_t size)
{
    if (!rp_differ_only_in(base, alt, k, 0))
        return 0;
    struct rp_effect e = rp_effect(base, alt);
    if (!e.n)
        return 0;
    char what[512];
    snprintf(what, sizeof what, "%s instead of %s%s", alt->key[k], base->key[k],
             k == RP_K_ROUTING ? " routing" : "");
    effect_text(text, size, &e, what);
    return 1;
}

/* Replication: a replicating placement against a plain one, all else equal. */
static void replication_findings(struct doc *d, struct rp_series *s, int ns)
{
    char text[2048];
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++) {
            if (!rp_placement_replicates(s[j].key[RP_K_PLACEMENT]) ||
                rp_placement_replicates(s[i].key[RP_K_PLACEMENT]) ||
                !pair_effect(&s[i], &s[j], RP_K_PLACEMENT, text, sizeof text))
                continue;
            char head[600];
            char piped[48] = ""; /* pipelined pairs are told apart from unpipelined ones */
            if (rp_overlap_depth(s[i].key[RP_K_OVERLAP]) > 1)
                snprintf(piped, sizeof piped, " overlap=%s", s[i].key[RP_K_OVERLAP]);
            snprintf(head, sizeof head, "replication, %s %s%s (%s)", s[i].key[RP_K_LAYOUT],
                     s[i].key[RP_K_ROUTING], piped, s[i].key[RP_K_SOURCE]);
            doc_li(d, head, "%s.", text);
        }
}

/* Dispatch modes: a padded (or graph-replayed) dispatch against the dynamic one, all else equal;
 * the drop rate says what a capacity factor cost in routed pairs. */
static void dispatch_findings(struct doc *d, struct rp_series *s, int ns)
{
    char text[2048];
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++) {
            if (strcmp(s[i].key[RP_K_DISPATCH], "dynamic") != 0 ||
                !rp_differ_only_in(&s[i], &s[j], RP_K_DISPATCH, 0))
                continue;
            struct rp_effect e = rp_effect(&s[i], &s[j]);
            if (!e.n)
                continue;
            char what[256], head[600];
            snprintf(what, sizeof what, "%s instead of dynamic", s[j].key[RP_K_DISPATCH]);
            effect_text(text, sizeof text, &e, what);
            const struct rp_point *last = s[j].n ? &s[j].pt[s[j].n - 1] : NULL;
            if (last && last->drop_rate > 0) { /* fewer pairs computed: not the same work */
                size_t tl = strlen(text);
                snprintf(text + tl, sizeof text - tl, "; it dropped %.1f %% of the token-expert "
                         "pairs at batch %g (over capacity)", 100 * last->drop_rate, last->batch);
            }
            snprintf(head, sizeof head, "dispatch mode, %s %s %s (%s)", s[i].key[RP_K_LAYOUT],
                     s[i].key[RP_K_ROUTING], s[i].key[RP_K_PLACEMENT], s[i].key[RP_K_SOURCE]);
            doc_li(d, head, "%s.", text);
        }
}

/* Deduplicated dispatch: pair against rank and node, all else equal, at each batch: the
 * inter-node bytes and layer latency of each mode and the mode the data favours. */
static void dedup_findings(struct doc *d, struct rp_series *s, int ns)
{
    for (int i = 0; i < ns; i++) {
        char all[4 * 2048] = "";
        int any = 0;
        for (int k = 0; k < s[i].n; k++) {
            struct rp_dedup_cmp c;
            if (!rp_dedup_compare(s, ns, i, k, &c))
                continue;
            char bt[CELL], modes[1536] = "", lat[CELL], by[CELL];
            batch_text(bt, c.batch);
            for (int m = 0; m < c.n; m++) {
                f_us(lat, c.mode[m].layer_us);
                f_bytes(by, c.mode[m].bytes_internode);
                size_t len = strlen(modes);
                snprintf(modes + len, sizeof modes - len, "%s%s %s µs / %s inter-node",
                         m ? ", " : "", s[c.mode[m].series].key[RP_K_DEDUP], lat, by);
            }
            const char *best = s[c.mode[c.best].series].key[RP_K_DEDUP];
            char fav[512];
            if (c.best == 0)
                snprintf(fav, sizeof fav, "favours pair (no other mode is faster)");
            else
                snprintf(fav, sizeof fav, "favours %s (%+.1f %% layer_us against pair, %s)", best,
                         100 * (c.ratio - 1),
                         c.verdict < 0    ? "beyond the 95 % confidence intervals"
                         : c.verdict == 0 ? "within the 95 % confidence intervals: noise"
                                          : "no confidence intervals: modelled");
            size_t len = strlen(all);
            snprintf(all + len, sizeof all - len, "%sat batch %s: %s; %s", any ? "; " : "", bt,
                     modes, fav);
            any = 1;
        }
        if (!any)
            continue;
        char head[600];
        snprintf(head, sizeof head, "dedup modes, %s %s %s (%s)", s[i].key[RP_K_LAYOUT],
                 s[i].key[RP_K_ROUTING], s[i].key[RP_K_PLACEMENT], s[i].key[RP_K_SOURCE]);
        doc_li(d, head, "%s.", all);
    }
}

/* Overlap: the pipeline depths of a workload ranked against the same workload without. */
static void overlap_findings(struct doc *d, struct rp_series *s, int ns)
{
    for (int i = 0; i < ns; i++) {
        int order[32];
        struct rp_effect eff[32];
        int n = rp_overlap_ranking(s, ns, i, order, eff, 32);
        if (!n)
            continue;
        char all[4 * 2048] = "", one[2048], what[64], head[600];
        for (int r = 0; r < n; r++) {
            snprintf(what, sizeof what, "overlap %s", s[order[r]].key[RP_K_OVERLAP]);
            effect_text(one, sizeof one, &eff[r], what);
            size_t len = strlen(all);
            snprintf(all + len, sizeof all - len, "%s%d. %s", r ? "; " : "", r + 1, one);
        }
        snprintf(head, sizeof head, "overlap against none, %s %s %s (%s)", s[i].key[RP_K_LAYOUT],
                 s[i].key[RP_K_ROUTING], s[i].key[RP_K_PLACEMENT], s[i].key[RP_K_SOURCE]);
        doc_li(d, head, "ranked by geometric-mean gain: %s.", all);
    }
}

/* Remedies: replication, eplb and overlap against one workload, at one batch. */
static void remedy_findings(struct doc *d, struct rp_series *s, int ns)
{
    for (int i = 0; i < ns; i++) {
        struct rp_remedy rem[32];
        double at;
        int n = rp_remedies(s, ns, i, rem, 32, &at);
        if (n < 2)
            continue;
        char all[4096] = "", bt[CELL], lat[CELL], head[600];
        for (int r = 0; r < n; r++) {
            const struct rp_series *a = &s[rem[r].series];
            char what[256];
            if (rem[r].placement && rem[r].overlap)
                snprintf(what, sizeof what, "%s + overlap %s", a->key[RP_K_PLACEMENT],
                         a->key[RP_K_OVERLAP]);
            else if (rem[r].overlap)
                snprintf(what, sizeof what, "overlap %s", a->key[RP_K_OVERLAP]);
            else
                snprintf(what, sizeof what, "%s", a->key[RP_K_PLACEMENT]);
            size_t len = strlen(all);
            snprintf(all + len, sizeof all - len, "%s%d. %s %+.1f %% (%s)", r ? ", " : "", r + 1,
                     what, 100 * (rem[r].ratio - 1),
                     rem[r].verdict < 0   ? "faster beyond the 95 % confidence intervals"
                     : rem[r].verdict > 0 ? "slower beyond the 95 % confidence intervals"
                                          : "within the 95 % confidence intervals");
        }
        batch_text(bt, at);
        const struct rp_point *p0 = NULL;
        for (int k = 0; k < s[i].n; k++)
            if (s[i].pt[k].batch == at)
                p0 = &s[i].pt[k];
        f_us(lat, p0 ? p0->layer_us : NAN);
        snprintf(head, sizeof head, "remedies, %s %s (%s)", s[i].key[RP_K_LAYOUT],
                 s[i].key[RP_K_ROUTING], s[i].key[RP_K_SOURCE]);
        doc_li(d, head, "layer_us at batch %s against %s without overlap (%s µs), most gain first: %s.",
               bt, s[i].key[RP_K_PLACEMENT], lat, all);
    }
}

/* The planner's projection beside the measurement. */
static void model_findings(struct doc *d, struct rp_series *s, int ns)
{
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++) {
            if (!rp_projects(&s[i], &s[j]))
                continue;
            struct rp_effect e = rp_effect(&s[i], &s[j]);
            if (!e.n)
                continue;
            char at[CELL];
            batch_text(at, e.at);
            doc_li(d, "model vs measured",
                   "%s: the model's layer latency is ×%.2f the measured one (geometric mean over "
                   "%d batches, ×%.2f to ×%.2f; ×%.2f at batch %s).",
                   s[i].label, e.geomean, e.n, e.min_ratio, e.max_ratio, e.ratio_at, at);
        }
}

/* The whole decode step of each model curve (docs/planning.md, "What a step includes"): which
 * part grows fastest from its smallest to its largest batch, and from which batch the step grows
 * at least half as fast as the batch (its knee at a log-log slope of 0.5: below it a larger batch
 * is nearly free per step, above it the step's time follows the batch). */
static void step_findings(struct doc *d, struct rp_series *s, int ns)
{
    static const char *const part_words[RP_NPART] = {
        "attention", "dense layers", "LM head", "small kernels", "host", "MoE layers", ""};
    for (int i = 0; i < ns; i++) {
        int a = -1, b = -1; /* the smallest and largest batch with a step */
        for (int p = 0; p < s[i].n; p++)
            if (s[i].pt[p].step_us > 0) {
                if (a < 0)
                    a = p;
                b = p;
            }
        if (a < 0 || b == a)
            continue;
        const struct rp_point *lo = &s[i].pt[a], *hi = &s[i].pt[b];
        int fast = -1;
        double grow = 0, add = 0;
        for (int k = 0; k < RP_NPART - 1; k++) { /* overlap is not a part that grows */
            double g = hi->part_us[k] - lo->part_us[k];
            if (lo->part_us[k] > 0 && g > add) {
                add = g;
                grow = hi->part_us[k] / lo->part_us[k];
                fast = k;
            }
        }
        double *bt = malloc((size_t)s[i].n * sizeof *bt), *st = malloc((size_t)s[i].n * sizeof *st);
        int n = 0;
        for (int p = 0; bt && st && p < s[i].n; p++)
            if (s[i].pt[p].step_us > 0) {
                bt[n] = s[i].pt[p].batch;
                st[n++] = s[i].pt[p].step_us;
            }
        struct rp_knee k = n > 1 ? rp_knee(bt, st, n, 0.5) : (struct rp_knee){0};
        free(bt);
        free(st);
        char from[CELL], to[CELL], knee[CELL * 2] = "its time grows less than half as fast as the "
                                                    "batch over the whole sweep";
        batch_text(from, lo->batch);
        batch_text(to, hi->batch);
        if (k.found) {
            char kb[CELL];
            batch_text(kb, k.batch);
            snprintf(knee, sizeof knee, "from batch %s its time grows at least half as fast as "
                     "the batch (log-log slope %.2f)", kb, k.slope);
        }
        if (fast < 0)
            continue;
        doc_li(d, "whole step",
               "%s: from batch %s to %s the step goes from %.2f to %.2f ms per token; its "
               "fastest-growing part is the %s (×%.2f, +%.2f ms; the step +%.2f ms); %s.",
               s[i].label, from, to, lo->step_us / 1e3, hi->step_us / 1e3, part_words[fast], grow,
               add / 1e3, (hi->step_us - lo->step_us) / 1e3, knee);
    }
}

/* Each All-to-All group's peak busbw and where it peaks. */
static void a2a_findings(struct doc *d, struct group *a2a, int na2a)
{
    for (int g = 0; g < na2a; g++) {
        const struct mp_table *t = a2a[g].t;
        double best = NAN, best_at = NAN;
        for (int r = 0; r < a2a[g].n; r++) {
            double v = num(t, a2a[g].rows[r], MPC_busbw_GBps);
            if (!isnan(v) && (isnan(best) || v > best)) {
                best = v;
                best_at = num(t, a2a[g].rows[r], MPC_bytes_per_rank);
            }
        }
        char sz[CELL];
        f_bytes(sz, best_at);
        if (!isnan(best))
            doc_li(d, a2a[g].label, "All-to-All busbw peaks at %.3g GB/s with %s per rank.",
                   best, sz);
    }
}

/* Each FFN group's roofline fractions and where it turns compute-bound. */
static void ffn_findings(struct doc *d, struct group *ffn, int nffn)
{
    for (int g = 0; g < nffn; g++) {
        const struct mp_table *t = ffn[g].t;
        double lo = NAN, hi = NAN, lo_at = NAN, hi_at = NAN, first_compute = NAN;
        for (int r = 0; r < ffn[g].n; r++) {
            long row = ffn[g].rows[r];
            double f = num(t, row, MPC_roofline_fraction), bt = num(t, row, MPC_batch);
            if (!isnan(f) && (isnan(lo) || f < lo)) {
                lo = f;
                lo_at = bt;
            }
            if (!isnan(f) && (isnan(hi) || f > hi)) {
                hi = f;
                hi_at = bt;
            }
            if (isnan(first_compute) && !strcmp(str(t, row, MPC_bound), "compute"))
                first_compute = bt;
        }
        if (isnan(lo))
            continue;
        char a[CELL], b[CELL], fc[CELL];
        batch_text(a, lo_at);
        batch_text(b, hi_at);
        batch_text(fc, first_compute);
        char bound[160];
        if (isnan(first_compute))
            snprintf(bound, sizeof bound, "memory-bound at every batch");
        else
            snprintf(bound, sizeof bound, "compute-bound from batch %.40s", fc);
        doc_li(d, ffn[g].label,
               "expert FFN at %.0f %% of its roofline at batch %s up to %.0f %% at batch %s; %s.",
               100 * lo, a, 100 * hi, b, bound);
    }
}

/* What hot experts cost: each curve of skewed routing against the uniform one, all else equal —
 * the layer latency, the bubble and the load imbalance the hot experts bring. */
static void hot_expert_findings(struct doc *d, struct rp_series *s, int ns)
{
    char text[2048];
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++) {
            if (strcmp(s[i].key[RP_K_ROUTING], "uniform") != 0 ||
                !strcmp(s[j].key[RP_K_ROUTING], "uniform") ||
                !pair_effect(&s[i], &s[j], RP_K_ROUTING, text, sizeof text))
                continue;
            char head[600];
            snprintf(head, sizeof head, "hot experts, %s %s (%s)", s[i].key[RP_K_LAYOUT],
                     s[i].key[RP_K_PLACEMENT], s[i].key[RP_K_SOURCE]);
            doc_li(d, head, "%s.", text);
        }
}

/* The bubble_ratio above which a point's bubble is traced to a rank (layer_rank_samples.csv). */
#define WAIT_FINDING_BUBBLE 0.05

/* The host, "node N" when the rank ran nowhere (the model), of row `row` of run's rank samples. */
static void rank_host_text(const struct rp_run *run, int row, char *buf, size_t size)
{
    const struct mp_table *t = &run->rank_samples;
    int ch = mp_table_col(t, MPC_host), cn = mp_table_col(t, MPC_node);
    if (ch >= 0 && row >= 0 && t->cells[row][ch][0])
        snprintf(buf, size, "host %s", t->cells[row][ch]);
    else if (cn >= 0 && row >= 0)
        snprintf(buf, size, "node %s", t->cells[row][cn]);
    else
        snprintf(buf, size, "host unknown");
}

/* Who the others wait for (docs/METRICS.md, "Who waits for whom"): for each curve, its points with
 * a bubble above WAIT_FINDING_BUBBLE traced to their critical rank in layer_rank_samples.csv,
 * consecutive batches with the same rank and cause in one row of the table (with `emit`; without,
 * only counted): routing (the rank's experts get RP_ROUTING_ROWS× the mean rows or more), a slow
 * rank or host (rows near the mean), or no one rank. Returns the rows. */
static int waiting_rows(struct doc *d, struct rp_series *s, int ns, int emit)
{
    int nrows = 0;
    for (int i = 0; i < ns; i++) {
        const struct rp_run *run = s[i].run;
        if (!run->n_rank_pts)
            continue;
        int p = 0;
        while (p < s[i].n) {
            struct rp_critical c = {.rank = -1};
            int pt = -1;
            if (s[i].pt[p].bubble > WAIT_FINDING_BUBBLE &&
                (pt = rp_rank_point_find(run, &s[i], s[i].pt[p].batch)) >= 0)
                c = rp_point_critical(&run->rank_samples, run->rank_pt_first[pt],
                                      run->rank_pt_count[pt]);
            if (c.rank < 0) {
                p++;
                continue;
            }
            /* the following points with the same rank and cause */
            int q = p + 1, npts = 1;
            double bmin = s[i].pt[p].bubble, bmax = bmin, share_min = c.share, ex_min = c.explains,
                   ex_max = c.explains, rows_min = c.rows_ratio, rows_max = c.rows_ratio;
            for (; q < s[i].n; q++) {
                int qt = s[i].pt[q].bubble > WAIT_FINDING_BUBBLE
                             ? rp_rank_point_find(run, &s[i], s[i].pt[q].batch)
                             : -1;
                if (qt < 0)
                    break;
                struct rp_critical e = rp_point_critical(&run->rank_samples,
                                                         run->rank_pt_first[qt],
                                                         run->rank_pt_count[qt]);
                int vague = c.share < RP_CRITICAL_SHARE; /* no one rank: any rank continues it */
                if ((e.share < RP_CRITICAL_SHARE) != vague ||
                    (!vague && (e.rank != c.rank || e.routing != c.routing)))
                    break;
                npts++;
                double b = s[i].pt[q].bubble;
                bmin = b < bmin ? b : bmin;
                bmax = b > bmax ? b : bmax;
                share_min = e.share < share_min ? e.share : share_min;
                ex_min = e.explains < ex_min ? e.explains : ex_min;
                ex_max = e.explains > ex_max ? e.explains : ex_max;
                rows_min = e.rows_ratio < rows_min ? e.rows_ratio : rows_min;
                rows_max = e.rows_ratio > rows_max ? e.rows_ratio : rows_max;
            }
            char where[160], host[160], range[64];
            if (npts == 1)
                snprintf(where, sizeof where, "batch %g (bubble %.0f %%)", s[i].pt[p].batch,
                         100 * bmin);
            else
                snprintf(where, sizeof where, "batches %g–%g, %d points (bubble %.0f–%.0f %%)",
                         s[i].pt[p].batch, s[i].pt[q - 1].batch, npts, 100 * bmin, 100 * bmax);
            rank_host_text(run, c.row, host, sizeof host);
            if (npts == 1 || round(100 * ex_min) == round(100 * ex_max))
                snprintf(range, sizeof range, "%.0f %%", 100 * ex_min);
            else
                snprintf(range, sizeof range, "%.0f–%.0f %%", 100 * ex_min, 100 * ex_max);
            char cells[7][CELL];
            snprintf(cells[0], CELL, "%s", s[i].label);
            snprintf(cells[1], CELL, "%s", where);
            snprintf(cells[2], CELL, "rank %d (%s)%s", c.rank, host,
                     c.share < RP_CRITICAL_SHARE ? ", most often" : "");
            if (c.share < RP_CRITICAL_SHARE)
                snprintf(cells[3], CELL, "no one rank: a shifting load or noise");
            else if (c.routing) {
                const char *ex = rp_rank_experts(run, pt, c.rank);
                snprintf(cells[3], CELL, "routing%s%.120s", ex[0] ? ": holds experts " : "", ex);
            } else
                snprintf(cells[3], CELL, "a slow rank or host, not routing");
            snprintf(cells[4], CELL, "%.2f×%s", c.routing ? rows_min : rows_max,
                     c.routing && npts > 1 && rows_max - rows_min >= 0.05 ? " or more" : "");
            snprintf(cells[5], CELL, "%.0f %%%s", 100 * (npts > 1 ? share_min : c.share),
                     npts > 1 && share_min < 1 ? " or more" : "");
            snprintf(cells[6], CELL, "%s", range);
            if (emit)
                doc_row(d, 7, cells, 0);
            nrows++;
            p = q;
        }
    }
    return nrows;
}

/* "Who the others wait for" as a table, one row per stretch of waiting_rows; nothing when no
 * point's bubble is traced to a rank. */
static void waiting_section(struct doc *d, struct rp_series *s, int ns)
{
    static const char *const head[] = {
        "curve", "points", "critical rank (host)", "why", "its rows / mean rows",
        "critical in (iterations)", "waiting for it (all ranks' layer time)",
    };
    if (waiting_rows(d, s, ns, 0) == 0)
        return;
    doc_table_head(d, "Who the others wait for", head, 7);
    waiting_rows(d, s, ns, 1);
    doc_table(d, 0);
    doc_p(d, "Points whose bubble exceeds %.0f %%, traced to their critical rank (the longest busy "
             "time) in layer_rank_samples.csv; consecutive batches with the same rank and cause "
             "share a row. Routing: the rank's experts get %.2f× the mean rows or more; a slow "
             "rank or host: its rows are near the mean; no one rank: the critical rank is the "
             "same in fewer than %.0f %% of iterations.",
          100 * WAIT_FINDING_BUBBLE, RP_ROUTING_ROWS, 100 * RP_CRITICAL_SHARE);
}

typedef void (*finding_fn)(struct doc *d, struct rp_series *s, int ns);

/* A findings section: its title and list when any of `fns` finds something (tried first on a
 * document that writes nothing), else nothing at all. */
static void findings_section(struct doc *d, const char *title, const finding_fn *fns, int n,
                             struct rp_series *s, int ns)
{
    struct doc dry = {NULL, NULL, 0};
    for (int i = 0; i < n; i++)
        fns[i](&dry, s, ns);
    if (!dry.items)
        return;
    doc_h(d, 3, title);
    doc_ul(d, 1);
    for (int i = 0; i < n; i++)
        fns[i](d, s, ns);
    doc_ul(d, 0);
}

/* The caution the findings carry when measured points are noisy (docs/METRICS.md, "Stability"):
 * how many scatter by more than MP_NOISY_SPREAD, and what that means for the comparisons. */
static void noise_caution(struct doc *d, const struct rp_series *s, int ns)
{
    int known = 0, noisy = 0;
    double worst = 0;
    for (int i = 0; i < ns; i++)
        for (int p = 0; p < s[i].n; p++)
            if (strcmp(s[i].key[RP_K_SOURCE], "measured") == 0 && !isnan(s[i].pt[p].spread)) {
                known++;
                noisy += s[i].pt[p].spread > MP_NOISY_SPREAD;
                worst = s[i].pt[p].spread > worst ? s[i].pt[p].spread : worst;
            }
    if (noisy)
        doc_p(d, "Noise: %d of the %d measured points scatter by more than %.0f %% of their "
                 "median (spread, (p90 − p10) / p50 of their iterations; up to %.0f %%). The "
                 "comparisons below come from one run of each configuration: a difference within "
                 "the points' spread is not one these runs can show (each such finding says so); "
                 "repeat the runs alternately (ci/nccl-regress) before acting on it.",
              noisy, known, 100 * MP_NOISY_SPREAD, 100 * worst);
}

/* The findings, grouped by the question each answers (docs/plots.md): where each configuration
 * stops scaling (the headline, the table of curves, the All-to-All and the FFN alone), what hot
 * experts cost, which remedy pays, and how close the model is to the measurements. MP_OK or
 * MP_ERR_RUNTIME (out of memory). */
int write_findings(struct doc *d, struct rp_series *s, int ns, const struct reference *ref,
                          struct group *a2a, int na2a, struct group *ffn, int nffn)
{
    struct rp_cap *caps = calloc((size_t)ns + 1, sizeof *caps);
    if (!caps) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < ns; i++) {
        struct cols c;
        if (cols_of(&s[i], &c) != MP_OK) {
            free(caps);
            return MP_ERR_RUNTIME;
        }
        caps[i] = rp_batch_cap(c.batch, c.ratio, c.n);
        cols_free(&c);
    }
    doc_h(d, 2, "Findings");
    noise_caution(d, s, ns);
    doc_h(d, 3, "Where each configuration stops scaling");
    doc_ul(d, 1);
    headline(d, s, ns, caps);
    doc_ul(d, 0);
    int rc = findings_table(d, s, ns, ref, caps);
    free(caps);
    if (rc != MP_OK)
        return rc;
    if (na2a + nffn > 0) {
        doc_ul(d, 1);
        a2a_findings(d, a2a, na2a);
        ffn_findings(d, ffn, nffn);
        doc_ul(d, 0);
    }
    static const finding_fn hot[] = {hot_expert_findings};
    static const finding_fn remedies[] = {replication_findings, dispatch_findings, dedup_findings,
                                          overlap_findings, remedy_findings};
    static const finding_fn model[] = {model_findings};
    static const finding_fn step[] = {step_findings};
    findings_section(d, "What hot experts cost", hot, 1, s, ns);
    waiting_section(d, s, ns);
    findings_section(d, "Which remedy pays", remedies, 5, s, ns);
    findings_section(d, "How close the model is to the measurements", model, 1, s, ns);
    findings_section(d, "The whole decode step (model runs): what grows with the batch", step, 1,
                     s, ns);
    return MP_OK;
}
