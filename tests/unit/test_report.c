/* test_report.c - the report's findings on synthetic data: batch cap, knee, bubble, the effect of
 * replication, overlap ranked against none and the remedies ranked together, the dedup modes,
 * curve grouping of a run directory, the reference label and SVG inlining, and the critical rank
 * of a point's per-rank samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "error.h"
#include "report.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The published table of the first seed: 1.25 at batch 1, compute-bound at 16 and 32, 1.30 at 64. */
static void test_cap_reference(void)
{
    double b[] = {1, 16, 32, 64, 128}, r[] = {1.25, 0.93, 0.92, 1.30, 1.75};
    struct rp_cap c = rp_batch_cap(b, r, N(b));
    CHECK_INT(c.kind, RP_CAP_FOUND);
    CHECK_NEAR(c.cap, 32, 0);
    CHECK_NEAR(c.cap_ratio, 0.92, 1e-12);
    CHECK_NEAR(c.next, 64, 0);
    CHECK_NEAR(c.next_ratio, 1.30, 1e-12);
    CHECK_INT(c.leading, 1);
    CHECK_NEAR(c.start, 16, 0);
    CHECK_NEAR(c.max_compute, 0.93, 1e-12);
    /* linear in log2(batch): 5 + (1 − 0.92) / (1.30 − 0.92) = 5.2105..., 2^that = 37.03 */
    CHECK_NEAR(c.cross, exp2(5.0 + 0.08 / 0.38), 1e-9);
    CHECK(c.cross > 32 && c.cross < 64);
    CHECK_NEAR(c.max_ratio, 1.75, 1e-12);
    CHECK_NEAR(c.max_ratio_at, 128, 0);
}

static void test_cap_kinds(void)
{
    double b[] = {1, 2, 4, 8};
    /* compute-bound throughout: the largest batch is a lower bound */
    double low[] = {0.2, 0.3, 0.5, 0.9};
    struct rp_cap c = rp_batch_cap(b, low, 4);
    CHECK_INT(c.kind, RP_CAP_NOT_REACHED);
    CHECK_NEAR(c.cap, 8, 0);
    CHECK_NEAR(c.max_ratio, 0.9, 1e-12);
    CHECK_NEAR(c.start, 1, 0);
    CHECK_NEAR(c.max_compute, 0.9, 1e-12);
    /* network-bound at the smallest batches only: still no cap within the sweep */
    double lead[] = {3.0, 1.2, 0.5, 0.4};
    c = rp_batch_cap(b, lead, 4);
    CHECK_INT(c.kind, RP_CAP_NOT_REACHED);
    CHECK_INT(c.leading, 2);
    CHECK_NEAR(c.start, 4, 0);
    CHECK_NEAR(c.cap, 8, 0);
    CHECK_NEAR(c.max_compute, 0.5, 1e-12);
    CHECK_NEAR(c.max_ratio, 3.0, 1e-12);
    /* exactly 1 is not "exceeds" */
    double one[] = {0.5, 1.0, 1.0, 1.0};
    c = rp_batch_cap(b, one, 4);
    CHECK_INT(c.kind, RP_CAP_NOT_REACHED);
    CHECK_NEAR(c.cap, 8, 0);
    /* network-bound throughout */
    double high[] = {1.5, 1.2, 1.1, 2.0};
    c = rp_batch_cap(b, high, 4);
    CHECK_INT(c.kind, RP_CAP_NETWORK);
    CHECK_INT(c.leading, 4);
    CHECK(isnan(c.cap) && isnan(c.start) && isnan(c.max_compute));
    /* the first exceedance after the compute-bound start counts, even if the ratio dips again */
    double dip[] = {0.5, 1.2, 0.8, 1.5};
    c = rp_batch_cap(b, dip, 4);
    CHECK_INT(c.kind, RP_CAP_FOUND);
    CHECK_NEAR(c.cap, 1, 0);
    CHECK_NEAR(c.next, 2, 0);
    CHECK_NEAR(c.cross, exp2(0.5 / 0.7), 1e-9);
    /* a NAN ratio (an empty cell) is skipped, not taken as a crossing */
    double gap[] = {0.5, NAN, 0.7, 1.4};
    c = rp_batch_cap(b, gap, 4);
    CHECK_INT(c.kind, RP_CAP_FOUND);
    CHECK_NEAR(c.cap, 4, 0);
    CHECK_NEAR(c.next, 8, 0);
    double none[] = {NAN, NAN};
    c = rp_batch_cap(b, none, 2);
    CHECK_INT(c.kind, RP_CAP_NO_DATA);
    c = rp_batch_cap(b, none, 0);
    CHECK_INT(c.kind, RP_CAP_NO_DATA);
}

static void test_knee(void)
{
    /* sqrt growth up to 16, then quadratic: the knee is at 16 (slope 2 from 16 to 32) */
    double b[] = {1, 2, 4, 8, 16, 32, 64};
    double l[] = {100, 141.42, 200, 282.84, 400, 1600, 6400};
    struct rp_knee k = rp_knee(b, l, N(b), 1.1);
    CHECK(k.found);
    CHECK_NEAR(k.batch, 16, 0);
    CHECK_NEAR(k.to, 32, 0);
    CHECK_NEAR(k.slope, 2.0, 1e-9);
    CHECK_NEAR(k.max_slope, 2.0, 1e-9);
    /* exactly proportional growth has slope 1: no knee at threshold 1.1 */
    double lin[] = {10, 20, 40, 80, 160, 320, 640};
    k = rp_knee(b, lin, N(b), 1.1);
    CHECK(!k.found);
    CHECK_NEAR(k.max_slope, 1.0, 1e-9);
    /* ... but with threshold 0.9 the first point is already one */
    k = rp_knee(b, lin, N(b), 0.9);
    CHECK(k.found);
    CHECK_NEAR(k.batch, 1, 0);
    /* a fine sweep: one noisy point makes a steep step between neighbours (40 -> 48: slope
     * log(1.3)/log(1.2) = 1.44) but over a doubling (from 8 on) growth stays sublinear */
    double fb[] = {8, 16, 24, 32, 40, 48, 56, 64};
    double fl[] = {100, 170, 240, 300, 330, 429, 440, 470};
    k = rp_knee(fb, fl, N(fb), 1.1);
    CHECK(!k.found);
    CHECK(k.max_slope < 1.1);
    /* too few points, and points without a latency */
    double one_b[] = {4}, one_l[] = {10};
    k = rp_knee(one_b, one_l, 1, 1.1);
    CHECK(!k.found);
    CHECK(isnan(k.max_slope));
    double nb[] = {1, 2, 4}, nl[] = {NAN, 10, 40};
    k = rp_knee(nb, nl, 3, 1.1);
    CHECK(k.found);
    CHECK_NEAR(k.batch, 2, 0);
    CHECK_NEAR(k.slope, 2.0, 1e-9);
}

static void test_bubble(void)
{
    double b[] = {1, 2, 4, 8}, bub[] = {0.10, 0.35, NAN, 0.05};
    struct rp_bubble s = rp_bubble_summary(b, bub, 4);
    CHECK_NEAR(s.max, 0.35, 1e-12);
    CHECK_NEAR(s.max_at, 2, 0);
    CHECK_NEAR(s.last, 0.05, 1e-12);
    CHECK_NEAR(s.last_at, 8, 0);
    double none[] = {NAN, NAN, NAN, NAN};
    s = rp_bubble_summary(b, none, 4);
    CHECK(isnan(s.max) && isnan(s.last));
}

/* ---- a synthetic run directory ---- */

static char dir[64];

static void write_file(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char layer_hdr[] =
    "source,backend,comm,model,hidden,ffn,experts,topk,shared,layout,tp,ep,world,routing,"
    "placement,batch,seq,seed,tokens_per_rank,iters,layer_us,layer_p99_us,ffn_us,ffn_p99_us,"
    "comm_us,comm_p99_us,comm_comp_ratio,bubble_ratio,load_imbalance,local_hit_rate,"
    "layer_ci_lo_us,layer_ci_hi_us\n";

/* contiguous vs replicate-hot:2 under hot routing (rows out of batch order on purpose), plus a
 * uniform curve; replication makes batch 4 20 % faster and batch 8 10 % faster. */
/* contiguous vs replicate-hot:2 under hot routing (rows out of batch order on purpose), plus a
 * uniform curve; replication makes batch 4 20 % faster and batch 8 10 % faster, and only at batch 4
 * are the confidence intervals of the medians apart. */
static const char layer_rows[] =
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,hot:2:10,contiguous,8,1,1,4,5,200,260,150,180,"
    "40,50,0.2667,0.30,1.6,0.5,170,230\n"
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,hot:2:10,contiguous,4,1,1,2,5,100,130,80,90,"
    "15,20,0.1875,0.25,1.5,0.5,95,105\n"
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,hot:2:10,contiguous,16,1,1,8,5,500,600,200,"
    "230,280,300,1.4,0.20,1.4,0.5,490,510\n"
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,hot:2:10,replicate-hot:2,4,1,1,2,5,80,90,60,"
    "70,15,20,0.25,0.10,1.1,0.7,75,85\n"
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,hot:2:10,replicate-hot:2,8,1,1,4,5,180,200,"
    "130,140,40,50,0.3077,0.05,1.05,0.7,160,190\n"
    "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,uniform,contiguous,4,1,1,2,5,90,95,70,75,15,"
    "20,0.2143,0.05,1.0,0.5,,\n";

static void test_run_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_report.%d", (int)getpid());
    CHECK(mkdir(dir, 0755) == 0);
    char text[4096];
    snprintf(text, sizeof text, "%s%s", layer_hdr, layer_rows);
    write_file("layer.csv", text);
    write_file("run.json", "{\"tool\": \"moeperf-layer\", \"world\": 2}\n");

    struct rp_run run;
    CHECK_INT(rp_run_load(dir, &run), MP_OK);
    CHECK(run.json != NULL);
    CHECK_INT(run.layer.nrows, 6);
    CHECK_INT(run.a2a.ncols, 0);

    struct rp_series *s = NULL;
    int n = 0;
    CHECK_INT(rp_layer_series(&run, 1, &s, &n), MP_OK);
    CHECK_INT(n, 3);
    if (n == 3) {
        /* the layout they share is left out (docs/plots.md, "Curve labels") */
        CHECK_STR(s[0].label, "hot:2:10 contiguous (measured)");
        CHECK_STR(s[1].label, "hot:2:10 replicate-hot:2 (measured)");
        CHECK_STR(s[2].label, "uniform contiguous (measured)");
        CHECK_STR(s[0].key[RP_K_OVERLAP], ""); /* no such column */
        /* sorted by batch, every column read by name */
        CHECK_INT(s[0].n, 3);
        CHECK_NEAR(s[0].pt[0].batch, 4, 0);
        CHECK_NEAR(s[0].pt[1].batch, 8, 0);
        CHECK_NEAR(s[0].pt[2].batch, 16, 0);
        CHECK_NEAR(s[0].pt[0].layer_us, 100, 0);
        CHECK_NEAR(s[0].pt[1].layer_p99_us, 260, 0);
        CHECK_NEAR(s[0].pt[2].comm_us, 280, 0);
        CHECK_NEAR(s[0].pt[1].imbalance, 1.6, 1e-12);
        /* the bubble at each batch */
        CHECK_NEAR(s[0].pt[0].bubble, 0.25, 1e-12);
        CHECK_NEAR(s[0].pt[1].bubble, 0.30, 1e-12);
        CHECK_NEAR(s[0].pt[2].bubble, 0.20, 1e-12);
        double b[3], r[3], bub[3];
        for (int i = 0; i < 3; i++) {
            b[i] = s[0].pt[i].batch;
            r[i] = s[0].pt[i].ratio;
            bub[i] = s[0].pt[i].bubble;
        }
        struct rp_cap c = rp_batch_cap(b, r, 3);
        CHECK_INT(c.kind, RP_CAP_FOUND);
        CHECK_NEAR(c.cap, 8, 0);
        struct rp_bubble bs = rp_bubble_summary(b, bub, 3);
        CHECK_NEAR(bs.max_at, 8, 0);

        /* replication: only the placement differs between curves 0 and 1 */
        CHECK(rp_differ_only_in(&s[0], &s[1], RP_K_PLACEMENT, 0));
        CHECK(!rp_differ_only_in(&s[0], &s[2], RP_K_PLACEMENT, 0));
        CHECK(!rp_differ_only_in(&s[1], &s[2], RP_K_PLACEMENT, 0));
        CHECK(!rp_differ_only_in(&s[0], &s[0], RP_K_PLACEMENT, 0));
        CHECK(rp_placement_replicates(s[1].key[RP_K_PLACEMENT]));
        CHECK(!rp_placement_replicates(s[0].key[RP_K_PLACEMENT]));
        CHECK(rp_placement_replicates("eplb:16"));
        struct rp_effect e = rp_effect(&s[0], &s[1]);
        CHECK_INT(e.n, 2);
        CHECK_INT(e.faster, 1); /* batch 4: [75, 85] below [95, 105]; batch 8 overlaps */
        CHECK_INT(e.slower, 0);
        struct rp_effect back = rp_effect(&s[1], &s[0]);
        CHECK_INT(back.faster, 0);
        CHECK_INT(back.slower, 1);
        CHECK_NEAR(back.geomean, 1 / sqrt(0.8 * 0.9), 1e-12);
        CHECK(isnan(s[2].pt[0].layer_ci_lo_us)); /* an empty cell */
        CHECK_NEAR(e.geomean, sqrt(0.8 * 0.9), 1e-12);
        CHECK_NEAR(e.min_ratio, 0.8, 1e-12);
        CHECK_NEAR(e.max_ratio, 0.9, 1e-12);
        CHECK_NEAR(e.at, 8, 0);
        CHECK_NEAR(e.ratio_at, 0.9, 1e-12);
        CHECK_NEAR(e.bubble_base, 0.30, 1e-12);
        CHECK_NEAR(e.bubble_alt, 0.05, 1e-12);
        CHECK_NEAR(e.imbalance_base, 1.6, 1e-12);
        CHECK_NEAR(e.imbalance_alt, 1.05, 1e-12);
        /* curves without a common batch have no effect */
        struct rp_series lone = s[2];
        struct rp_point p16 = s[0].pt[2];
        lone.pt = &p16;
        lone.n = 1;
        CHECK_INT(rp_effect(&s[1], &lone).n, 0);
    }

    /* a model run pairs with the measurement when only source, backend and comm differ */
    if (n == 3) {
        struct rp_series m = s[0]; /* a copy: its key pointers can be replaced */
        char src[] = "model", be[] = "model";
        m.key[RP_K_SOURCE] = src;
        m.key[RP_K_BACKEND] = be;
        m.key[RP_K_COMM] = be;
        CHECK(rp_differ_only_in(&s[0], &m, RP_K_SOURCE, 1));
        CHECK(!rp_differ_only_in(&s[0], &m, RP_K_SOURCE, 0));
        m.key[RP_K_LAYOUT] = be;
        CHECK(!rp_differ_only_in(&s[0], &m, RP_K_SOURCE, 1));
    }
    rp_series_free(s, n);
    rp_run_free(&run);

    /* two runs with the same workload: the run directory's name tells the curves apart */
    struct rp_run two[2];
    CHECK_INT(rp_run_load(dir, &two[0]), MP_OK);
    CHECK_INT(rp_run_load(dir, &two[1]), MP_OK);
    CHECK_INT(rp_layer_series(two, 2, &s, &n), MP_OK);
    CHECK_INT(n, 6);
    if (n == 6) {
        const char *base = strrchr(dir, '/') + 1;
        char want[160];
        snprintf(want, sizeof want, "hot:2:10 contiguous [%s] (measured)", base);
        CHECK_STR(s[0].label, want);
    }
    rp_series_free(s, n);
    rp_run_free(&two[0]);
    rp_run_free(&two[1]);

    /* a key that differs between any two curves labels every curve, in one form */
    snprintf(text, sizeof text, "%s%s%s", layer_hdr, layer_rows,
             "measured,cpu,mpi,m,64,64,8,2,0,tp1ep2,1,2,2,uniform,contiguous,4,4,1,2,5,90,95,70,"
             "75,15,20,0.2143,0.05,1.0,0.5,,\n");
    write_file("layer.csv", text);
    CHECK_INT(rp_run_load(dir, &run), MP_OK);
    CHECK_INT(rp_layer_series(&run, 1, &s, &n), MP_OK);
    CHECK_INT(n, 4);
    if (n == 4) {
        CHECK_STR(s[0].label, "hot:2:10 contiguous seq=1 (measured)");
        CHECK_STR(s[2].label, "uniform contiguous seq=1 (measured)");
        CHECK_STR(s[3].label, "uniform contiguous seq=4 (measured)");
    }
    rp_series_free(s, n);
    rp_run_free(&run);

    /* a missing column is a usage error; so is a directory without any CSV */
    write_file("layer.csv", "source,layout,routing,placement,batch,layer_us\nmeasured,a,b,c,1,2\n");
    fprintf(stderr, "(an error about a missing column is expected next)\n");
    CHECK_INT(rp_run_load(dir, &run), MP_ERR_USAGE);
    char p[128];
    snprintf(p, sizeof p, "%s/layer.csv", dir);
    unlink(p);
    fprintf(stderr, "(an error about a directory without CSV files is expected next)\n");
    CHECK_INT(rp_run_load(dir, &run), MP_ERR_USAGE);
    write_file("a2a.csv", "source,pattern\n");
    fprintf(stderr, "(an error about a missing a2a column is expected next)\n");
    CHECK_INT(rp_run_load(dir, &run), MP_ERR_USAGE);
    snprintf(p, sizeof p, "%s/a2a.csv", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/run.json", dir);
    unlink(p);
    rmdir(dir);
    fprintf(stderr, "(an error about a missing directory is expected next)\n");
    CHECK_INT(rp_run_load(dir, &run), MP_ERR_USAGE);
}

static void test_label_and_svg(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_report_ref.%d.csv", (int)getpid());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("# a table\n#  label:  published: 8×A100, top-2 \nbatch,comm_comp_ratio\n1,0.5\n", f);
        fclose(f);
    }
    char *label = rp_csv_label(path);
    CHECK_STR(label, "published: 8×A100, top-2");
    free(label);
    f = fopen(path, "w");
    if (f) {
        fputs("# no label here\nbatch\n1\n", f);
        fclose(f);
    }
    CHECK(rp_csv_label(path) == NULL);
    unlink(path);
    CHECK(rp_csv_label(path) == NULL);

    const char svg[] = "<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg width=\"10\">\n"
                       "<defs><path id='gpPt1' d='M0'/><use xlink:href='#gpPt1' id='gpPt2'/>"
                       "</defs><g id=\"a\" style=\"filter:url(#textbox)\" data-gid='x'/></svg>\n";
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    CHECK_INT(rp_svg_inline(svg, "f1-", m), MP_OK);
    fclose(m);
    CHECK_STR(buf, "<svg width=\"10\">\n"
                   "<defs><path id='f1-gpPt1' d='M0'/><use xlink:href='#f1-gpPt1' id='f1-gpPt2'/>"
                   "</defs><g id=\"f1-a\" style=\"filter:url(#f1-textbox)\" data-gid='x'/></svg>\n");
    free(buf);
    m = open_memstream(&buf, &len);
    CHECK_INT(rp_svg_inline("<html>no figure</html>", "f1-", m), MP_ERR_RUNTIME);
    fclose(m);
    free(buf);
}

/* A curve with the given placement, overlap and routing, and points (batch, layer, CI lo, CI hi). */
static struct rp_series curve(const char *placement, const char *overlap, const char *routing,
                              struct rp_point *pt, int n)
{
    struct rp_series c = {0};
    for (int k = 0; k < RP_NKEY; k++)
        c.key[k] = (char *)"";
    c.key[RP_K_SOURCE] = (char *)"measured";
    c.key[RP_K_LAYOUT] = (char *)"tp1ep2";
    c.key[RP_K_ROUTING] = (char *)routing;
    c.key[RP_K_PLACEMENT] = (char *)placement;
    c.key[RP_K_OVERLAP] = (char *)overlap;
    c.pt = pt;
    c.n = n;
    return c;
}
#define PT(b, l, lo, hi) {.batch = b, .layer_us = l, .layer_ci_lo_us = lo, .layer_ci_hi_us = hi}

static void test_overlap_remedies(void)
{
    CHECK_INT(rp_overlap_depth(""), 1);
    CHECK_INT(rp_overlap_depth("0"), 1);
    CHECK_INT(rp_overlap_depth("1"), 1);
    CHECK_INT(rp_overlap_depth("4"), 4);
    struct rp_point p0[] = {PT(4, 100, 95, 105), PT(8, 200, 190, 210)};
    struct rp_point p1[] = {PT(4, 90, 85, 92), PT(8, 150, 140, 160)};   /* faster at both */
    struct rp_point p2[] = {PT(4, 120, 115, 125), PT(8, 210, 200, 220)}; /* slower at 4 only */
    struct rp_point p3[] = {PT(4, 80, 75, 85), PT(8, 160, 150, 170)};
    struct rp_point p4[] = {PT(4, 70, 65, 75)};                          /* batch 4 only */
    struct rp_point p5[] = {PT(4, 10, 9, 11), PT(8, 20, 19, 21)};
    struct rp_point p6[] = {PT(4, 10, 9, 11), PT(8, 20, 19, 21)};
    struct rp_series s[] = {
        curve("contiguous", "1", "hot:2:10", p0, 2),      curve("contiguous", "2", "hot:2:10", p1, 2),
        curve("contiguous", "4", "hot:2:10", p2, 2),      curve("replicate-hot:2", "1", "hot:2:10", p3, 2),
        curve("replicate-hot:2", "2", "hot:2:10", p4, 1), curve("round-robin", "1", "hot:2:10", p5, 2),
        curve("contiguous", "2", "uniform", p6, 2),
    };
    /* overlap against none: overlap 2 then 4, by geometric mean; nothing against a pipelined base */
    int order[8];
    struct rp_effect eff[8];
    CHECK_INT(rp_overlap_ranking(s, 7, 0, order, eff, 8), 2);
    CHECK_INT(order[0], 1);
    CHECK_INT(order[1], 2);
    CHECK_NEAR(eff[0].geomean, sqrt(0.9 * 0.75), 1e-12);
    CHECK_INT(eff[0].faster, 2);
    CHECK_INT(eff[1].slower, 1);
    CHECK_INT(eff[1].faster, 0);
    CHECK_INT(rp_overlap_ranking(s, 7, 3, order, eff, 8), 1); /* replicate-hot:2 with overlap 2 */
    CHECK_INT(order[0], 4);
    CHECK_INT(rp_overlap_ranking(s, 7, 1, order, eff, 8), 0);
    /* remedies: s1..s4 (round-robin does not replicate, another routing is another workload);
     * batch 4 is the one all four have */
    struct rp_remedy r[8];
    double at;
    CHECK_INT(rp_remedies(s, 7, 0, r, 8, &at), 4);
    CHECK_NEAR(at, 4, 0);
    static const int ranked[] = {4, 3, 1, 2}, verdict[] = {-1, -1, -1, 1};
    static const double ratio[] = {0.7, 0.8, 0.9, 1.2};
    for (int i = 0; i < 4; i++) {
        CHECK_INT(r[i].series, ranked[i]);
        CHECK_INT(r[i].verdict, verdict[i]);
        CHECK_NEAR(r[i].ratio, ratio[i], 1e-12);
    }
    CHECK(r[0].placement && r[0].overlap);
    CHECK(r[1].placement && !r[1].overlap);
    CHECK(!r[2].placement && r[2].overlap);
    /* without s4 every remedy has batch 8 too: the largest common batch, where overlap 4's CI
     * overlaps the base's */
    CHECK_INT(rp_remedies(s, 4, 0, r, 8, &at), 3);
    CHECK_NEAR(at, 8, 0);
    CHECK_INT(r[0].series, 1);
    CHECK_INT(r[1].series, 3);
    CHECK_INT(r[2].series, 2);
    CHECK_INT(r[2].verdict, 0);
    /* a replicating or pipelined base has no remedies list */
    CHECK_INT(rp_remedies(s, 7, 3, r, 8, &at), 0);
    CHECK(isnan(at));
    CHECK_INT(rp_remedies(s, 7, 1, r, 8, &at), 0);
}

/* The dedup modes of one workload at each batch: pair first, the others as they appear, the
 * fastest favoured, with the 95 % CIs apart, overlapping or (model rows) absent. */
static void test_dedup_compare(void)
{
    struct rp_point pair[] = {PT(4, 100, 95, 105), PT(8, 200, 190, 210)};
    struct rp_point rank[] = {PT(4, 98, 94, 102), PT(8, 150, 140, 160)};
    struct rp_point node[] = {PT(4, 120, 115, 125), {.batch = 8, .layer_us = 140,
                                                     .layer_ci_lo_us = NAN, .layer_ci_hi_us = NAN}};
    struct rp_point other[] = {PT(4, 10, 9, 11)};
    pair[0].bytes_internode = 1000;
    rank[0].bytes_internode = 600;
    struct rp_series s[] = {
        curve("contiguous", "1", "uniform", rank, 2), curve("contiguous", "1", "uniform", pair, 2),
        curve("contiguous", "1", "uniform", node, 2), curve("contiguous", "1", "hot:2:10", other, 1),
    };
    s[0].key[RP_K_DEDUP] = (char *)"rank";
    s[1].key[RP_K_DEDUP] = (char *)"pair";
    s[2].key[RP_K_DEDUP] = (char *)"node";
    s[3].key[RP_K_DEDUP] = (char *)"rank"; /* another routing: another workload */
    struct rp_dedup_cmp c;
    CHECK_INT(rp_dedup_compare(s, 4, 1, 0, &c), 3);
    CHECK_NEAR(c.batch, 4, 0);
    CHECK_INT(c.mode[0].series, 1);
    CHECK_INT(c.mode[1].series, 0);
    CHECK_INT(c.mode[2].series, 2);
    CHECK_NEAR(c.mode[0].bytes_internode, 1000, 0);
    CHECK_NEAR(c.mode[1].bytes_internode, 600, 0);
    CHECK_INT(c.best, 1);
    CHECK_NEAR(c.ratio, 0.98, 1e-12);
    CHECK_INT(c.verdict, 0); /* 94..102 overlaps 95..105 */
    CHECK_INT(rp_dedup_compare(s, 4, 1, 1, &c), 3);
    CHECK_INT(c.best, 2); /* node at 140 */
    CHECK_INT(c.verdict, 2); /* node has no interval */
    s[2].pt[1].layer_us = 300; /* now rank, apart from pair */
    CHECK_INT(rp_dedup_compare(s, 4, 1, 1, &c), 3);
    CHECK_INT(c.best, 1);
    CHECK_INT(c.verdict, -1);
    /* only a pair curve is a base */
    CHECK_INT(rp_dedup_compare(s, 4, 0, 0, &c), 0);
    CHECK_INT(rp_dedup_compare(&s[1], 1, 0, 0, &c), 0); /* nothing to compare */
    CHECK_INT(rp_dedup_compare(s, 4, 1, 5, &c), 0);
}

/* A warm-cache curve (flush_cache 0) and a cold one are different workloads: no effect of a
 * placement is read across them, but a model curve (which flushes nothing) still pairs with a
 * measured cold one. */
static void test_flush_key(void)
{
    struct rp_point p[] = {PT(4, 100, 95, 105)};
    struct rp_series cold = curve("contiguous", "1", "uniform", p, 1);
    struct rp_series warm = curve("replicate-hot:2", "1", "uniform", p, 1);
    struct rp_series warm_same = cold, model = cold;
    cold.key[RP_K_FLUSH] = (char *)"1";
    warm.key[RP_K_FLUSH] = (char *)"0";
    warm_same.key[RP_K_FLUSH] = (char *)"0";
    model.key[RP_K_FLUSH] = (char *)"0";
    model.key[RP_K_SOURCE] = (char *)"model";
    CHECK_STR(rp_key_names[RP_K_FLUSH], "flush_cache");
    CHECK_INT(rp_differ_only_in(&cold, &warm, RP_K_PLACEMENT, 0), 0);
    CHECK_INT(rp_differ_only_in(&cold, &warm_same, RP_K_FLUSH, 0), 1);
    CHECK_INT(rp_differ_only_in(&cold, &model, RP_K_SOURCE, 1), 1);
    CHECK_INT(rp_differ_only_in(&cold, &model, RP_K_SOURCE, 0), 0);
}

/* Who the others wait for, on a table of 3 iterations × 3 ranks: rank 2 has the longest busy time
 * (layer_us − wait_us) in iterations 0 and 2, rank 0 in iteration 1; with its rows at the mean it
 * is a slow rank, with 3× the mean rows its routing; the waits for it are the share of the layer
 * time of its iterations. */
static void test_critical_rank(void)
{
    struct mp_table t = {0};
    static char *hdr[] = {"iter", "rank", "layer_us", "wait_us", "rows"};
    static char *rows[9][5] = {
        {"0", "0", "100", "60", "10"}, {"0", "1", "100", "70", "10"}, {"0", "2", "100", "0", "10"},
        {"1", "0", "90", "0", "10"},   {"1", "1", "90", "50", "10"},  {"1", "2", "90", "40", "10"},
        {"2", "0", "80", "50", "10"},  {"2", "1", "80", "40", "10"},  {"2", "2", "80", "10", "10"},
    };
    char **cells[9];
    for (int i = 0; i < 9; i++)
        cells[i] = rows[i];
    t.ncols = 5;
    t.cols = hdr;
    t.nrows = 9;
    t.cells = cells;
    struct rp_critical c = rp_point_critical(&t, 0, 9);
    CHECK_INT(c.iters, 3);
    CHECK_INT(c.nranks, 3);
    CHECK_INT(c.rank, 2);
    CHECK_INT(c.row, 2);
    CHECK_NEAR(c.share, 2.0 / 3, 1e-12);
    CHECK_NEAR(c.rows_ratio, 1, 1e-12);
    CHECK_INT(c.routing, 0);
    /* waits in its iterations: 130 (iteration 0) + 100 (2), over 3·(100 + 90 + 80) */
    CHECK_NEAR(c.explains, 230.0 / 810, 1e-12);
    /* rank 2 gets 3× the mean rows: 30 against 10 + 10 + 30 over 3 */
    rows[2][4] = "30";
    rows[8][4] = "30";
    c = rp_point_critical(&t, 0, 9);
    CHECK_NEAR(c.rows_ratio, 60 / (2 * 50 / 3.0), 1e-12);
    CHECK_INT(c.routing, 1);
    /* a subset of the rows: iteration 1 alone */
    c = rp_point_critical(&t, 3, 3);
    CHECK_INT(c.rank, 0);
    CHECK_NEAR(c.share, 1, 0);
    /* without wait_us (a file written before it): no finding */
    hdr[3] = "other";
    c = rp_point_critical(&t, 0, 9);
    CHECK_INT(c.rank, -1);
    hdr[3] = "wait_us";
}

int main(void)
{
    mp_log_init("test_report", -1);
    test_flush_key();
    test_cap_reference();
    test_cap_kinds();
    test_knee();
    test_bubble();
    test_run_dir();
    test_overlap_remedies();
    test_dedup_compare();
    test_label_and_svg();
    test_critical_rank();
    CHECK_DONE();
}
