/* test_results.c - CSV rows, files, resume, the reader, keys, filtering, mkdir -p and run.json, all
 * inside a temporary directory. */
#include "check.h"
#include "error.h"
#include "results.h"
#include "topo.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static char *join(const char *a, const char *b)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", a, b);
    return buf[k];
}

static void write_text(const char *path, const char *text, const char *mode)
{
    FILE *f = fopen(path, mode);
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/* The whole file as a heap string ("" when missing). */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *b = calloc(1, 1 << 16);
    if (!f || !b) {
        if (f)
            fclose(f);
        return b;
    }
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static void test_format(void)
{
    struct mp_row r = {NULL, 0, 0, 0};
    mp_row_dbl(&r, 1234.5);
    mp_row_dbl(&r, 0.000123);
    mp_row_dbl(&r, 1e20);
    mp_row_dbl(&r, NAN);
    mp_row_dbl(&r, 0.0);
    mp_row_dbl(&r, -0.0);
    mp_row_dbl(&r, 2.5e7);
    mp_row_dbl(&r, 1e-5);
    mp_row_dbl(&r, 999999.7);
    mp_row_dbl(&r, 123456);
    mp_row_dbl(&r, -1.25);
    mp_row_dbl(&r, 1.0 / 3);
    CHECK_STR(r.buf, "1234.5,0.000123,1e+20,,0,0,25000000,1e-05,1000000,123456,-1.25,0.333333");
    CHECK_INT(r.ncells, 12);

    mp_row_reset(&r);
    CHECK_INT(r.ncells, 0);
    CHECK_INT(r.len, 0);
    mp_row_int(&r, -42);
    mp_row_int(&r, 9007199254740993LL);
    mp_row_str(&r, "plain");
    mp_row_str(&r, "a,b");
    mp_row_str(&r, "say \"hi\"");
    mp_row_str(&r, "");
    mp_row_str(&r, "two\nlines");
    CHECK_STR(r.buf, "-42,9007199254740993,plain,\"a,b\",\"say \"\"hi\"\"\",,\"two\nlines\"");
    CHECK_INT(r.ncells, 7);
    mp_row_free(&r);
    CHECK(r.buf == NULL);
}

/* The printf forms mp_row_dbl documents (%.6g, %.0f from 1e6 to 1e15) and %lld, against the
 * cells written for whole and fractional values across every magnitude, signs, and the extremes
 * of long long. */
static void test_format_whole(void)
{
    long bad = 0, cases = 0;
    struct mp_row r = {NULL, 0, 0, 0};
    char want[64];
    for (int e = 0; e < 18; e++)
        for (int k = 0; k < 200; k++)
            for (int sign = -1; sign <= 1; sign += 2) {
                double mag = pow(10, e) * (1 + k * 0.0731);
                double v = sign * (k % 2 ? floor(mag) : mag);
                snprintf(want, sizeof want, "%.6g", v);
                if (strchr(want, 'e') && fabs(v) >= 1e-3 && fabs(v) < 1e15)
                    snprintf(want, sizeof want, "%.0f", v);
                mp_row_reset(&r);
                mp_row_dbl(&r, v);
                bad += strcmp(r.buf, want) != 0;
                cases++;
            }
    static const long long ints[] = {0, 1, -1, 9, 10, -10, 1234567890123LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(want, sizeof want, "%lld", ints[i]);
        mp_row_reset(&r);
        mp_row_int(&r, ints[i]);
        bad += strcmp(r.buf, want) != 0;
        cases++;
    }
    CHECK_INT(bad, 0);
    CHECK(cases > 7000);
    mp_row_free(&r);
}

static const char *const cols[] = {"model", "batch", "note", "layer_us", "ratio"};

static void fill_row(struct mp_row *r, const char *model, long long batch, const char *note,
                     double us, double ratio)
{
    mp_row_reset(r);
    mp_row_str(r, model);
    mp_row_int(r, batch);
    mp_row_str(r, note);
    mp_row_dbl(r, us);
    mp_row_dbl(r, ratio);
}

static void test_write_read(void)
{
    struct mp_csv c;
    struct mp_row r = {NULL, 0, 0, 0};
    CHECK_INT(mp_csv_open(&c, tmpdir, "layer.csv", cols, 5, 0), MP_OK);
    fill_row(&r, "deepseek-v3", 64, "hot:4:15, replicated", 1234.5, 0.000123);
    CHECK_INT(mp_csv_write(&c, &r), MP_OK);
    fill_row(&r, "mixtral \"8x7b\"", 1, "", 2.5e7, NAN);
    CHECK_INT(mp_csv_write(&c, &r), MP_OK);
    /* a row with the wrong cell count is refused and nothing is written */
    mp_row_reset(&r);
    mp_row_str(&r, "short");
    CHECK_INT(mp_csv_write(&c, &r), MP_ERR_RUNTIME);
    mp_csv_close(&c);

    char *text = read_text(join(tmpdir, "layer.csv"));
    CHECK_STR(text, "model,batch,note,layer_us,ratio\n"
                    "deepseek-v3,64,\"hot:4:15, replicated\",1234.5,0.000123\n"
                    "\"mixtral \"\"8x7b\"\"\",1,,25000000,\n");
    free(text);

    struct mp_table t;
    CHECK_INT(mp_table_read(join(tmpdir, "layer.csv"), &t), MP_OK);
    CHECK_INT(t.ncols, 5);
    CHECK_INT(t.nrows, 2);
    if (t.nrows == 2 && t.ncols == 5) {
        CHECK_STR(t.cols[4], "ratio");
        CHECK_STR(t.cells[0][0], "deepseek-v3");
        CHECK_STR(t.cells[0][2], "hot:4:15, replicated");
        CHECK_NEAR(atof(t.cells[0][3]), 1234.5, 0);
        CHECK_NEAR(atof(t.cells[0][4]), 0.000123, 1e-15);
        CHECK_STR(t.cells[1][0], "mixtral \"8x7b\"");
        CHECK_STR(t.cells[1][2], "");
        CHECK_STR(t.cells[1][4], "");
        CHECK_INT(mp_table_col(&t, "layer_us"), 3);
        CHECK_INT(mp_table_col(&t, "model"), 0);
        CHECK_INT(mp_table_col(&t, "Model"), -1);

        /* keys from the table agree with keys from the rows that wrote it */
        fill_row(&r, "deepseek-v3", 64, "hot:4:15, replicated", 0, 0);
        for (int nkey = 1; nkey <= 3; nkey++) {
            char *a = mp_row_key(&r, nkey), *b = mp_table_key(&t, 0, nkey);
            CHECK_STR(a, b);
            free(a);
            free(b);
        }
        char *k3 = mp_row_key(&r, 3);
        CHECK_STR(k3, "deepseek-v3,64,\"hot:4:15, replicated\"");
        free(k3);
        fill_row(&r, "mixtral \"8x7b\"", 1, "", 0, 0);
        char *a = mp_row_key(&r, 2), *b = mp_table_key(&t, 1, 2);
        CHECK_STR(a, "\"mixtral \"\"8x7b\"\"\",1");
        CHECK_STR(a, b);
        free(a);
        free(b);
    }
    mp_table_free(&t);
    mp_row_free(&r);
}

static void test_resume(void)
{
    struct mp_csv c;
    struct mp_row r = {NULL, 0, 0, 0};
    const char *path = join(tmpdir, "resume.csv");
    CHECK_INT(mp_csv_open(&c, tmpdir, "resume.csv", cols, 5, 0), MP_OK);
    fill_row(&r, "a", 1, "x", 1.5, 0.5);
    CHECK_INT(mp_csv_write(&c, &r), MP_OK);
    mp_csv_close(&c);
    /* a row cut by a kill */
    write_text(path, "b,2,\"cut, in", "a");

    /* the reader drops the cut row */
    struct mp_table t;
    CHECK_INT(mp_table_read(path, &t), MP_OK);
    CHECK_INT(t.nrows, 1);
    mp_table_free(&t);

    CHECK_INT(mp_csv_open(&c, tmpdir, "resume.csv", cols, 5, 1), MP_OK);
    fill_row(&r, "b", 2, "y", 2.5, 0.25);
    CHECK_INT(mp_csv_write(&c, &r), MP_OK);
    mp_csv_close(&c);
    char *text = read_text(path);
    CHECK_STR(text, "model,batch,note,layer_us,ratio\na,1,x,1.5,0.5\nb,2,y,2.5,0.25\n");
    free(text);

    /* resume with different columns: usage error, file untouched */
    const char *other[] = {"model", "batch", "note", "layer_us", "bubble"};
    CHECK_INT(mp_csv_open(&c, tmpdir, "resume.csv", other, 5, 1), MP_ERR_USAGE);
    CHECK(c.f == NULL);
    text = read_text(path);
    CHECK_STR(text, "model,batch,note,layer_us,ratio\na,1,x,1.5,0.5\nb,2,y,2.5,0.25\n");
    free(text);

    /* resume on a missing or empty file starts it; resume=0 replaces */
    CHECK_INT(mp_csv_open(&c, tmpdir, "fresh.csv", cols, 5, 1), MP_OK);
    mp_csv_close(&c);
    text = read_text(join(tmpdir, "fresh.csv"));
    CHECK_STR(text, "model,batch,note,layer_us,ratio\n");
    free(text);
    CHECK_INT(mp_csv_open(&c, tmpdir, "resume.csv", other, 5, 0), MP_OK);
    mp_csv_close(&c);
    text = read_text(path);
    CHECK_STR(text, "model,batch,note,layer_us,bubble\n");
    free(text);

    /* unwritable: a directory in the way, or a directory that does not exist */
    CHECK_INT(mkdir(join(tmpdir, "adir.csv"), 0755), 0);
    CHECK_INT(mp_csv_open(&c, tmpdir, "adir.csv", cols, 5, 0), MP_ERR_USAGE);
    CHECK_INT(mp_csv_open(&c, join(tmpdir, "nodir"), "x.csv", cols, 5, 0), MP_ERR_USAGE);
    rmdir(join(tmpdir, "adir.csv"));
    mp_row_free(&r);
}

static void test_reader_errors(void)
{
    struct mp_table t;
    const char *path = join(tmpdir, "bad.csv");
    write_text(path, "# comment\na,b,c\n1,2,3\n\n# another\n4,5\n6,7,8\n", "w");
    CHECK_INT(mp_table_read(path, &t), MP_ERR_USAGE);
    CHECK(t.cells == NULL && t.nrows == 0);

    write_text(path, "# comment\na,b,c\r\n1,2,3\r\n\n\"x,y\",\"\"\"q\"\"\",\n", "w");
    CHECK_INT(mp_table_read(path, &t), MP_OK);
    CHECK_INT(t.ncols, 3);
    CHECK_INT(t.nrows, 2);
    if (t.nrows == 2) {
        CHECK_STR(t.cells[0][2], "3");
        CHECK_STR(t.cells[1][0], "x,y");
        CHECK_STR(t.cells[1][1], "\"q\"");
        CHECK_STR(t.cells[1][2], "");
    }
    mp_table_free(&t);

    /* a last line without newline: dropped when cut short, kept when whole */
    write_text(path, "a,b,c\n1,2,3\n4,5", "w");
    CHECK_INT(mp_table_read(path, &t), MP_OK);
    CHECK_INT(t.nrows, 1);
    mp_table_free(&t);
    write_text(path, "a,b,c\n1,2,3\n4,5,6", "w");
    CHECK_INT(mp_table_read(path, &t), MP_OK);
    CHECK_INT(t.nrows, 2);
    mp_table_free(&t);

    CHECK_INT(mp_table_read(join(tmpdir, "missing.csv"), &t), MP_ERR_USAGE);
    write_text(path, "# only a comment\n", "w");
    CHECK_INT(mp_table_read(path, &t), MP_ERR_USAGE);
    unlink(path);
}

static void test_keyset_filter(void)
{
    struct mp_keyset ks = {0, NULL};
    CHECK_INT(mp_keyset_load(tmpdir, "nothing.csv", 2, &ks), MP_OK);
    CHECK_INT(ks.n, 0);

    /* many keys, inserted out of order, with duplicates */
    char k[32];
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof k, "m,%d", (i * 97) % 200);
        mp_keyset_add(&ks, k);
    }
    CHECK_INT(ks.n, 200);
    CHECK(mp_keyset_has(&ks, "m,0"));
    CHECK(mp_keyset_has(&ks, "m,199"));
    CHECK(!mp_keyset_has(&ks, "m,200"));
    CHECK(!mp_keyset_has(&ks, "m"));
    mp_keyset_free(&ks);
    CHECK_INT(ks.n, 0);

    /* summary and samples of a run: the point (b, 2) has samples but no summary row */
    const char *scols[] = {"model", "batch", "layer_us"};
    const char *pcols[] = {"model", "batch", "iter", "layer_us"};
    struct mp_csv c;
    struct mp_row r = {NULL, 0, 0, 0};
    CHECK_INT(mp_csv_open(&c, tmpdir, "sum.csv", scols, 3, 0), MP_OK);
    const char *models[] = {"a", "x,\"y\"", "b"};
    for (int m = 0; m < 2; m++) {
        mp_row_reset(&r);
        mp_row_str(&r, models[m]);
        mp_row_int(&r, m + 1);
        mp_row_dbl(&r, 10.5);
        CHECK_INT(mp_csv_write(&c, &r), MP_OK);
    }
    mp_csv_close(&c);
    CHECK_INT(mp_csv_open(&c, tmpdir, "samples.csv", pcols, 4, 0), MP_OK);
    for (int m = 0; m < 3; m++)
        for (int it = 0; it < 2; it++) {
            mp_row_reset(&r);
            mp_row_str(&r, models[m]);
            mp_row_int(&r, m + 1);
            mp_row_int(&r, it);
            mp_row_dbl(&r, 10 + it);
            CHECK_INT(mp_csv_write(&c, &r), MP_OK);
        }
    mp_csv_close(&c);
    write_text(join(tmpdir, "samples.csv"), "b,2,2,1", "a"); /* cut row */

    CHECK_INT(mp_keyset_load(tmpdir, "sum.csv", 2, &ks), MP_OK);
    CHECK_INT(ks.n, 2);
    CHECK(mp_keyset_has(&ks, "a,1"));
    CHECK(mp_keyset_has(&ks, "\"x,\"\"y\"\"\",2"));
    CHECK(!mp_keyset_has(&ks, "b,3"));

    struct stat st;
    CHECK_INT(chmod(join(tmpdir, "samples.csv"), 0640), 0);
    CHECK_INT(mp_csv_filter(tmpdir, "samples.csv", 2, &ks), MP_OK);
    char *text = read_text(join(tmpdir, "samples.csv"));
    CHECK_STR(text, "model,batch,iter,layer_us\n"
                    "a,1,0,10\na,1,1,11\n"
                    "\"x,\"\"y\"\"\",2,0,10\n\"x,\"\"y\"\"\",2,1,11\n");
    free(text);
    CHECK(stat(join(tmpdir, "samples.csv"), &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK_INT(mp_csv_filter(tmpdir, "none.csv", 2, &ks), MP_OK);
    CHECK(access(join(tmpdir, "none.csv"), F_OK) != 0);
    mp_keyset_free(&ks);
    mp_row_free(&r);
    unlink(join(tmpdir, "sum.csv"));
    unlink(join(tmpdir, "samples.csv"));
}

static void test_mkdir(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/run/a//b/c", tmpdir);
    CHECK_INT(mp_mkdir_p(p, "--out"), MP_OK);
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_INT(mp_mkdir_p(p, "--out"), MP_OK); /* exists already */
    write_text(join(tmpdir, "file"), "x", "w");
    snprintf(p, sizeof p, "%s/file/sub", tmpdir);
    CHECK_INT(mp_mkdir_p(p, "--out"), MP_ERR_USAGE);
    CHECK_INT(mp_mkdir_p(join(tmpdir, "file"), "--out"), MP_ERR_USAGE);
    unlink(join(tmpdir, "file"));
    snprintf(p, sizeof p, "%s/run/a/b/c", tmpdir);
    rmdir(p);
    snprintf(p, sizeof p, "%s/run/a/b", tmpdir);
    rmdir(p);
    snprintf(p, sizeof p, "%s/run/a", tmpdir);
    rmdir(p);
    rmdir(join(tmpdir, "run"));
}

static void test_runjson(void)
{
    char *argv[] = {"moeperf-layer", "--note", "a \"quoted\" arg", NULL};
    setenv("NCCL_TEST_RESULTS_VAR", "42", 1);
    setenv("NOT_NCCL_VAR", "1", 1);
    cJSON *j = mp_runjson_new("moeperf-layer", 3, argv);
    CHECK(j != NULL);
    if (!j)
        return;
    CHECK_INT(mp_runjson_write(j, tmpdir, 0), MP_OK);
    CHECK_INT(mp_runjson_write(j, tmpdir, 1), MP_OK); /* replaces end and finished */
    CHECK_INT(mp_runjson_write(j, join(tmpdir, "nodir"), 1), MP_ERR_RUNTIME);
    cJSON_Delete(j);
    CHECK(access(join(tmpdir, ".run.json.tmp"), F_OK) != 0);

    char *text = read_text(join(tmpdir, "run.json"));
    cJSON *p = cJSON_Parse(text);
    free(text);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "tool")), "moeperf-layer");
    cJSON *a = cJSON_GetObjectItemCaseSensitive(p, "argv");
    CHECK_INT(cJSON_GetArraySize(a), 3);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(a, 2)), "a \"quoted\" arg");
    const char *end = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "end"));
    const char *start = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "start"));
    CHECK(end && strlen(end) == 20 && end[10] == 'T' && end[19] == 'Z');
    CHECK(start && end && strcmp(start, end) <= 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "finished")));
    int nend = 0;
    for (cJSON *it = p->child; it; it = it->next)
        nend += strcmp(it->string, "end") == 0;
    CHECK_INT(nend, 1);
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "version")));
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "git_revision")));
    cJSON *build = cJSON_GetObjectItemCaseSensitive(p, "build");
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(build, "features")));
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "timer")));
    cJSON *env = cJSON_GetObjectItemCaseSensitive(p, "env");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(env, "NCCL_TEST_RESULTS_VAR")),
              "42");
    CHECK(cJSON_GetObjectItemCaseSensitive(env, "NOT_NCCL_VAR") == NULL);
    cJSON *topo = cJSON_GetObjectItemCaseSensitive(p, "topology");
    CHECK(cJSON_IsObject(topo));
    cJSON *hw = cJSON_GetObjectItemCaseSensitive(topo, "hwloc");
    CHECK(hw != NULL);
    if (cJSON_IsString(hw)) { /* built with hwloc: a real host has at least one PU and core */
        CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(topo, "pus")) >= 1);
        CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(topo, "cores")) >= 1);
        CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(topo, "nics")));
    } else {
        CHECK(cJSON_IsNull(hw));
    }
    cJSON_Delete(p);
    unlink(join(tmpdir, "run.json"));

    long long avail = mp_mem_available();
    CHECK(avail == -1 || avail > 0);
    if (access("/proc/meminfo", R_OK) == 0)
        CHECK(avail > 0);
}

int main(void)
{
    mp_log_init("test_results", -1);
    check_tmpdir(tmpdir, sizeof tmpdir, "moeperf-test-results");
    test_format();
    test_format_whole();
    test_write_read();
    test_resume();
    test_reader_errors();
    test_keyset_filter();
    test_mkdir();
    test_runjson();
    static const char *const files[] = {"layer.csv", "resume.csv", "fresh.csv", NULL};
    check_tmpdir_remove(tmpdir, files);
    CHECK_DONE();
}
