/* test_compare.c - moeperf-compare's loading, point matching and verdicts on tiny run directories
 * written by the test: regressions, improvements, inconclusive points, pooled repeats, run.json
 * warnings and the usage errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "compare.h"
#include "error.h"

static char root[256];

/* Write `text` to root/rel (directories created). */
static void put(const char *rel, const char *text)
{
    char path[512], cmd[600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    CHECK(system(cmd) == 0);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A growing text buffer for generated CSV files. */
static char buf[1 << 16];
static size_t blen;
static void bclear(void) { blen = 0, buf[0] = '\0'; }
__attribute__((format(printf, 1, 2))) static void bput(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + blen, sizeof buf - blen, fmt, ap);
    va_end(ap);
    if (n > 0)
        blen += (size_t)n;
}

static const char hdr[] = "source,layout,batch,iter,layer_us,ffn_us,comm_us\n";
static const char sum_hdr[] = "source,layout,batch,tokens_per_rank,layer_us\n";

/* n samples of one point: layer_us = l0 + i, ffn_us = f0 + i, comm_us = c0 + i. */
static void samples(int batch, int n, double l0, double f0, double c0)
{
    for (int i = 0; i < n; i++)
        bput("measured,tp1ep2,%d,%d,%g,%g,%g\n", batch, i, l0 + i, f0 + i, c0 + i);
}

static const char *dir(const char *rel)
{
    static char d[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(d[k], sizeof d[k], "%s/%s", root, rel);
    return d[k];
}

static const struct mp_cmp_row *row(const struct mp_cmp *c, const char *batch, const char *metric)
{
    int bcol = -1;
    for (int k = 0; k < c->nkey; k++)
        if (strcmp(c->key_cols[k], "batch") == 0)
            bcol = k;
    for (long i = 0; bcol >= 0 && i < c->nrows; i++)
        if (strcmp(c->key_cells[c->rows[i].point][bcol], batch) == 0 &&
            strcmp(c->metrics[c->rows[i].metric].name, metric) == 0)
            return &c->rows[i];
    fprintf(stderr, "no row batch %s metric %s\n", batch, metric);
    check_failures++;
    static const struct mp_cmp_row none;
    return &none;
}

static int has_warning(const struct mp_cmp *c, const char *needle)
{
    for (int i = 0; i < c->nwarn; i++)
        if (strstr(c->warn[i], needle))
            return 1;
    return 0;
}

static const struct mp_cmp_fact *fact(const struct mp_cmp *c, const char *label)
{
    for (int i = 0; i < c->nfacts; i++)
        if (strcmp(c->facts[i].label, label) == 0)
            return &c->facts[i];
    fprintf(stderr, "no fact %s\n", label);
    check_failures++;
    return NULL;
}

static void test_verdict_rule(void)
{
    const char *why;
    CHECK_INT(mp_cmp_verdict(5, 5, 0.10, 0.008, 0.05, 0.01, &why), MP_CMP_REGRESSION);
    CHECK(why == NULL);
    CHECK_INT(mp_cmp_verdict(5, 5, -0.10, 0.008, 0.05, 0.01, NULL), MP_CMP_IMPROVEMENT);
    CHECK_INT(mp_cmp_verdict(20, 20, 0.05, 0.001, 0.05, 0.01, NULL), MP_CMP_REGRESSION);
    CHECK_INT(mp_cmp_verdict(20, 20, -0.05, 0.001, 0.05, 0.01, NULL), MP_CMP_IMPROVEMENT);
    /* a big change that is not significant, and a significant change below the threshold */
    CHECK_INT(mp_cmp_verdict(20, 20, 0.30, 0.02, 0.05, 0.01, NULL), MP_CMP_UNCHANGED);
    CHECK_INT(mp_cmp_verdict(20, 20, 0.049, 1e-9, 0.05, 0.01, NULL), MP_CMP_UNCHANGED);
    CHECK_INT(mp_cmp_verdict(20, 20, -0.049, 1e-9, 0.05, 0.01, NULL), MP_CMP_UNCHANGED);
    /* too few samples is never a pass, whatever the numbers say */
    CHECK_INT(mp_cmp_verdict(4, 20, 0.50, 1e-9, 0.05, 0.01, &why), MP_CMP_INCONCLUSIVE);
    CHECK_STR(why, "too few samples");
    CHECK_INT(mp_cmp_verdict(20, 4, 0.0, 1.0, 0.05, 0.01, NULL), MP_CMP_INCONCLUSIVE);
    CHECK_INT(mp_cmp_verdict(0, 20, NAN, NAN, 0.05, 0.01, &why), MP_CMP_INCONCLUSIVE);
    CHECK_STR(why, "no samples on one side");
    CHECK_INT(mp_cmp_verdict(20, 20, NAN, 0.5, 0.05, 0.01, &why), MP_CMP_INCONCLUSIVE);
    CHECK_STR(why, "base median <= 0");
    /* the noise rule: a change within either side's spread is no change; beyond both, it stands */
    why = NULL;
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_IMPROVEMENT, -0.25, 0.10, 0.40, &why), MP_CMP_UNCHANGED);
    CHECK_STR(why, "within noise");
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_REGRESSION, 0.40, 0.40, 0.10, NULL), MP_CMP_UNCHANGED);
    why = NULL;
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_REGRESSION, 0.41, 0.40, 0.10, &why), MP_CMP_REGRESSION);
    CHECK(why == NULL);
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_REGRESSION, 0.06, NAN, NAN, NULL), MP_CMP_REGRESSION);
    /* symmetric: a fall to a fifth is the rise to five times seen from the other side */
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_IMPROVEMENT, -0.80, 2.0, 0.4, NULL), MP_CMP_IMPROVEMENT);
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_REGRESSION, 4.0, 0.4, 2.0, NULL), MP_CMP_REGRESSION);
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_IMPROVEMENT, -0.60, 1.6, 0.4, NULL), MP_CMP_UNCHANGED);
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_REGRESSION, 1.50, 0.4, 1.6, NULL), MP_CMP_UNCHANGED);
    CHECK_INT(mp_cmp_noise_rule(MP_CMP_INCONCLUSIVE, 0.9, 0.1, 0.1, NULL), MP_CMP_INCONCLUSIVE);
    /* 5 vs 5 can reach 2/252 = 0.0079 but not 0.005; 6 vs 6 reaches 2/924 = 0.0022 */
    CHECK_INT(mp_cmp_verdict(5, 5, 0.10, 0.0079, 0.05, 0.005, &why), MP_CMP_INCONCLUSIVE);
    CHECK_STR(why, "too few samples for this alpha");
    CHECK_INT(mp_cmp_verdict(6, 6, 0.10, 0.0022, 0.05, 0.005, NULL), MP_CMP_REGRESSION);
    CHECK_INT(MP_CMP_MIN_SAMPLES, 5);
    CHECK_STR(mp_cmp_verdict_name(MP_CMP_INCONCLUSIVE), "inconclusive");
}

/* base and new: batch 1 slower by 20 (regression) with a faster FFN (improvement), batch 16
 * identical, batch 64 with 3 base samples, batch 128 cut (samples, no summary row) in base, and
 * batch 256 only in new. */
static void write_pair(void)
{
    bclear();
    bput("%s", hdr);
    samples(1, 10, 100, 90, 10);
    samples(16, 10, 200, 180, 20);
    samples(64, 3, 300, 280, 30);
    samples(128, 10, 400, 380, 40);
    put("a/base/layer_samples.csv", buf);
    put("a/base/layer.csv", "source,layout,batch,tokens_per_rank,layer_us\n"
                            "measured,tp1ep2,1,1,104\nmeasured,tp1ep2,16,8,204\n"
                            "measured,tp1ep2,64,32,301\n");
    bclear();
    bput("%s", hdr);
    samples(1, 10, 120, 70, 10.5);
    samples(16, 10, 200, 180, 20);
    samples(64, 10, 300, 280, 30);
    samples(256, 10, 500, 480, 50);
    put("a/new/layer_samples.csv", buf);
    bclear();
    bput("%s", sum_hdr);
    bput("measured,tp1ep2,1,1,124\nmeasured,tp1ep2,16,8,204\nmeasured,tp1ep2,64,32,304\n"
         "measured,tp1ep2,256,128,504\n");
    put("a/new/layer.csv", buf);
    put("a/base/run.json",
        "{\"tool\": \"moeperf-layer\", \"git_revision\": \"abc\", \"world\": 2, \"nodes\": 1,"
        " \"ranks\": [{\"rank\": 0, \"host\": \"h0\", \"device\": \"cpu\"},"
        "             {\"rank\": 1, \"host\": \"h0\", \"device\": \"cpu\"}],"
        " \"libraries\": {\"comm\": \"nccl\", \"comm_version\": \"NCCL 2.21.5\"},"
        " \"env\": {\"NCCL_ALGO\": \"Ring\", \"OMPI_X\": \"1\", \"OMPI_MCA_orte_hnp_uri\": \"a\","
        "          \"OMPI_MCA_btl\": \"self,vader\"}, \"argv\": [\"/a/moeperf-layer\","
        " \"--batch\", \"1,16\", \"--out\", \"x\"], \"finished\": true}");
    put("a/new/run.json",
        "{\"tool\": \"moeperf-layer\", \"git_revision\": \"abc\", \"world\": 2, \"nodes\": 1,"
        " \"ranks\": [{\"rank\": 0, \"host\": \"h0\", \"device\": \"cpu\"},"
        "             {\"rank\": 1, \"host\": \"h1\", \"device\": \"cpu\"}],"
        " \"libraries\": {\"comm\": \"nccl\", \"comm_version\": \"NCCL 2.23.4\"},"
        " \"env\": {\"NCCL_ALGO\": \"Ring\", \"OMPI_X\": \"2\", \"OMPI_MCA_orte_hnp_uri\": \"b\","
        "          \"OMPI_MCA_btl\": \"self,tcp\"}, \"argv\": [\"/b/moeperf-layer\","
        " \"--batch\", \"1,16\", \"--out\", \"y\", \"--inject-delay-us\", \"5\"],"
        " \"debug\": {\"inject_delay_us\": 5}, \"finished\": true}");
}

static void test_pair(void)
{
    write_pair();
    struct mp_cmp c;
    struct mp_cmp_opts o = {0.05, 0.01, NULL, MP_CMP_UNIT_AUTO};
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("a/new"), &o, &c), MP_OK);
    CHECK_STR(c.tool, "moeperf-layer");
    CHECK_INT(c.nkey, 3);
    CHECK_INT(c.nmetrics, 3);
    CHECK_INT(c.npoints, 4); /* 1, 16, 64 of base in order, then 256 of new; 128 was cut */
    CHECK_INT(c.only_base, 0);
    CHECK_INT(c.only_new, 1);
    CHECK_INT(c.unit_run, 0);
    CHECK_INT(c.key_varies[0], 0);
    CHECK_INT(c.key_varies[2], 1);
    CHECK_STR(c.key_cells[0][2], "1");
    CHECK_STR(c.key_cells[3][2], "256");
    char *label = mp_cmp_point_label(&c, 1);
    CHECK_STR(label, "batch=16");
    free(label);

    /* batch 1: 100..109 vs 120..129, completely separated: exact p = 2/C(20,10) */
    const struct mp_cmp_row *r = row(&c, "1", "layer_us");
    CHECK_INT(r->n_base, 10);
    CHECK_INT(r->units_new, 10);
    CHECK_NEAR(r->base_med, 104, 0); /* nearest rank: 5th of 10 */
    CHECK_NEAR(r->new_med, 124, 0);
    CHECK_NEAR(r->change, 20.0 / 104.0, 1e-12);
    CHECK(r->mw.exact);
    CHECK_NEAR(r->mw.p, 2.0 / 184756.0, 1e-12);
    CHECK_INT(r->verdict, MP_CMP_REGRESSION);
    CHECK_INT(row(&c, "1", "ffn_us")->verdict, MP_CMP_IMPROVEMENT);
    /* comm_us 10..19 vs 10.5..19.5, interleaved: +3.6 % median, p ≈ 0.7: unchanged */
    r = row(&c, "1", "comm_us");
    CHECK_NEAR(r->change, 0.5 / 14.0, 1e-12);
    CHECK(r->mw.p > 0.5);
    CHECK_INT(r->verdict, MP_CMP_UNCHANGED);
    /* batch 16: identical samples, p = 1 */
    r = row(&c, "16", "layer_us");
    CHECK_NEAR(r->mw.p, 1.0, 0);
    CHECK_NEAR(r->change, 0.0, 0);
    CHECK_INT(r->verdict, MP_CMP_UNCHANGED);
    /* batch 64: 3 base samples; batch 256: none */
    r = row(&c, "64", "layer_us");
    CHECK_INT(r->n_base, 3);
    CHECK_INT(r->verdict, MP_CMP_INCONCLUSIVE);
    CHECK_STR(r->reason, "too few samples");
    r = row(&c, "256", "layer_us");
    CHECK_INT(r->n_base, 0);
    CHECK(isnan(r->change));
    CHECK_INT(r->verdict, MP_CMP_INCONCLUSIVE);
    CHECK_STR(r->reason, "no samples on one side");

    /* run.json: the library differs (expected), a host differs (warned), the new run was slowed */
    const struct mp_cmp_fact *f = fact(&c, "libraries.comm_version");
    CHECK(f && f->kind == MP_FACT_LIBRARY && f->differs);
    CHECK_STR(f ? f->new_ : NULL, "NCCL 2.23.4");
    f = fact(&c, "hosts (per rank)");
    CHECK(f && f->differs);
    CHECK_STR(f ? f->base : NULL, "h0 ×2");
    CHECK_STR(f ? f->new_ : NULL, "h0, h1");
    /* Open MPI's settings differ (btl), its per-job identifiers are left out (OMPI_MCA_orte_*) */
    f = fact(&c, "NCCL_/UCX_/OMPI_MCA_ environment");
    CHECK(f && f->differs);
    CHECK_STR(f ? f->base : NULL, "NCCL_ALGO=Ring OMPI_MCA_btl=self,vader");
    CHECK_STR(f ? f->new_ : NULL, "NCCL_ALGO=Ring OMPI_MCA_btl=self,tcp");
    CHECK(has_warning(&c, "OMPI_MCA_btl=self,tcp"));
    f = fact(&c, "command line"); /* program directory, --out and --inject-delay-us dropped */
    CHECK(f && !f->differs);
    CHECK_STR(f ? f->base : NULL, "moeperf-layer --batch 1,16");
    CHECK(has_warning(&c, "hosts (per rank)"));
    CHECK(has_warning(&c, "deliberately slowed"));
    CHECK(has_warning(&c, "cut short"));
    CHECK(has_warning(&c, "missing from"));
    CHECK(!has_warning(&c, "libraries.comm_version"));
    CHECK(!has_warning(&c, "git_revision"));
    mp_cmp_free(&c);

    /* the other way round: batch 1 improves, batch 64 is now only in base (3 samples there) */
    CHECK_INT(mp_cmp_load(dir("a/new"), dir("a/base"), &o, &c), MP_OK);
    CHECK_INT(row(&c, "1", "layer_us")->verdict, MP_CMP_IMPROVEMENT);
    CHECK_INT(row(&c, "1", "ffn_us")->verdict, MP_CMP_REGRESSION);
    CHECK_INT(c.only_base, 1);
    CHECK_INT(c.only_new, 0);
    mp_cmp_free(&c);
}

/* Repeats: 5 runs per side with 4 samples each, new 10 % slower in every run. */
static void test_repeats(void)
{
    for (int side = 0; side < 2; side++)
        for (int r = 0; r < 5; r++) {
            bclear();
            bput("%s", hdr);
            double base = 1000 + 7 * r, l0 = side ? base * 1.1 : base;
            samples(8, 4, l0, l0 - 50, 20);
            char rel[64];
            snprintf(rel, sizeof rel, "rep/%s/%02d/layer_samples.csv", side ? "new" : "base", r);
            put(rel, buf);
        }
    struct mp_cmp c;
    struct mp_cmp_opts o = {0.05, 0.01, NULL, MP_CMP_UNIT_AUTO};
    CHECK_INT(mp_cmp_load(dir("rep/base"), dir("rep/new"), &o, &c), MP_OK);
    CHECK_INT(c.nruns[0], 5);
    CHECK_INT(c.nruns[1], 5);
    CHECK_INT(c.unit_run, 1);
    const struct mp_cmp_row *r = row(&c, "8", "layer_us");
    CHECK_INT(r->n_base, 20);
    CHECK_INT(r->runs_new, 5);
    CHECK_INT(r->units_base, 5);
    CHECK(r->mw.exact);
    CHECK_NEAR(r->mw.p, 2.0 / 252.0, 1e-12); /* the 5 run medians completely separated */
    CHECK_INT(r->verdict, MP_CMP_REGRESSION);
    CHECK(has_warning(&c, "run.json")); /* no run.json in these runs */
    mp_cmp_free(&c);
    /* every sample ranked instead: 20 vs 20 */
    o.unit = MP_CMP_UNIT_ITERATION;
    CHECK_INT(mp_cmp_load(dir("rep/base"), dir("rep/new"), &o, &c), MP_OK);
    CHECK_INT(c.unit_run, 0);
    r = row(&c, "8", "layer_us");
    CHECK_INT(r->units_base, 20);
    CHECK(r->mw.p < 1e-6);
    CHECK_INT(r->verdict, MP_CMP_REGRESSION);
    mp_cmp_free(&c);
    /* one run against five, ranked by run: inconclusive (1 < 5), never a pass */
    o.unit = MP_CMP_UNIT_RUN;
    CHECK_INT(mp_cmp_load(dir("rep/base/00"), dir("rep/new"), &o, &c), MP_OK);
    r = row(&c, "8", "layer_us");
    CHECK_INT(r->units_base, 1);
    CHECK_INT(r->verdict, MP_CMP_INCONCLUSIVE);
    mp_cmp_free(&c);
}

static void test_usage_errors(void)
{
    struct mp_cmp c;
    struct mp_cmp_opts o = {0.05, 0.01, NULL, MP_CMP_UNIT_AUTO};
    write_pair();
    /* missing directory */
    CHECK_INT(mp_cmp_load(dir("nope"), dir("a/new"), &o, &c), MP_ERR_USAGE);
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("nope"), &o, &c), MP_ERR_USAGE);
    /* no results at all */
    put("empty/readme.txt", "nothing\n");
    CHECK_INT(mp_cmp_load(dir("empty"), dir("a/new"), &o, &c), MP_ERR_USAGE);
    /* summary without samples */
    put("nosamples/layer.csv", sum_hdr);
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("nosamples"), &o, &c), MP_ERR_USAGE);
    /* a different tool */
    put("a2a/a2a_samples.csv", "source,bytes_per_peer,iter,time_us\nmeasured,1024,0,5\n");
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("a2a"), &o, &c), MP_ERR_USAGE);
    /* a different workload: no point in common */
    bclear();
    bput("%s", hdr);
    for (int i = 0; i < 10; i++)
        bput("measured,tp2ep1,1,%d,100,90,10\n", i);
    put("other/layer_samples.csv", buf);
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("other"), &o, &c), MP_ERR_USAGE);
    /* different columns */
    put("cols/layer_samples.csv", "source,layout,iter,layer_us,ffn_us,comm_us\n"
                                  "measured,tp1ep2,0,1,1,1\n");
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("cols"), &o, &c), MP_ERR_USAGE);
    /* a sample that is not a number */
    bclear();
    bput("%s", hdr);
    samples(1, 9, 100, 90, 10);
    bput("measured,tp1ep2,1,9,fast,90,10\n");
    put("nan/layer_samples.csv", buf);
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("nan"), &o, &c), MP_ERR_USAGE);
    /* several tools in one directory without --tool, then with it */
    put("both/layer_samples.csv", buf);
    put("both/a2a_samples.csv", "source,bytes_per_peer,iter,time_us\nmeasured,1024,0,5\n");
    CHECK_INT(mp_cmp_load(dir("both"), dir("a/new"), &o, &c), MP_ERR_USAGE);
    o.tool = "a2a";
    CHECK_INT(mp_cmp_load(dir("a/base"), dir("a/new"), &o, &c), MP_ERR_USAGE);
    o.tool = "layer";
    bclear();
    bput("%s", hdr);
    samples(1, 10, 100, 90, 10);
    put("both/layer_samples.csv", buf);
    CHECK_INT(mp_cmp_load(dir("both"), dir("a/new"), &o, &c), MP_OK);
    CHECK_INT(row(&c, "1", "layer_us")->verdict, MP_CMP_REGRESSION);
    mp_cmp_free(&c);
}

int main(void)
{
    mp_log_init("test_compare", -1);
    check_tmpdir(root, sizeof root, "test_compare");
    test_verdict_rule();
    test_pair();
    test_repeats();
    test_usage_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    CHECK_DONE();
}
