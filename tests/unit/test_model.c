/* test_model.c - unit test of model presets, key=value model files and overrides. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "error.h"
#include "model.h"

/* The presets' fields (docs/CSV.md, Model files): name, H, D, E, K, shared, MoE layers. */
static const struct {
    const char *name;
    int h, d, e, k, shared, layers;
} table[] = {
    {"deepseek-v3", 7168, 2048, 256, 8, 1, 58},   {"kimi-k2", 7168, 2048, 384, 8, 1, 60},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8, 0, 94}, {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, 48},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0, 32},   {"mixtral-8x22b", 6144, 16384, 8, 2, 0, 56},
    {"gpt-oss-120b", 2880, 2880, 128, 4, 0, 36},  {"seed-k3", 4096, 2048, 128, 8, 1, 60},
};
enum { NTABLE = sizeof table / sizeof table[0] };

static char dir[64];
static char errbuf[2048];

/* Write `text` to dir/name and put that path in `path`. */
static void write_file(const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Run mp_model_resolve with stderr captured into errbuf. */
static int resolve(const char *spec, struct mp_model *m)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0)
        exit(1);
    int rc = mp_model_resolve(spec, m);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(errbuf, 1, sizeof errbuf - 1, tmp);
    errbuf[n] = '\0';
    fclose(tmp);
    return rc;
}

static int override(struct mp_model *m, int e, int k, int s, int h, int d, int l)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0)
        exit(1);
    int rc = mp_model_override(m, e, k, s, h, d, l);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(errbuf, 1, sizeof errbuf - 1, tmp);
    errbuf[n] = '\0';
    fclose(tmp);
    return rc;
}

static void check_model(const struct mp_model *m, const char *name, int h, int d, int e, int k,
                        int s, int l)
{
    CHECK_STR(m->name, name);
    CHECK_INT(m->hidden, h);
    CHECK_INT(m->ffn, d);
    CHECK_INT(m->experts, e);
    CHECK_INT(m->topk, k);
    CHECK_INT(m->shared, s);
    CHECK_INT(m->layers, l);
}

static void test_presets(void)
{
    CHECK_INT(mp_model_npresets, NTABLE);
    for (int i = 0; i < NTABLE; i++) {
        struct mp_model m;
        memset(&m, 0x7f, sizeof m);
        CHECK_INT(resolve(table[i].name, &m), MP_OK);
        check_model(&m, table[i].name, table[i].h, table[i].d, table[i].e, table[i].k,
                    table[i].shared, table[i].layers);
        if (strcmp(table[i].name, "seed-k3") == 0)
            CHECK(m.note && strstr(m.note, "assumptions"));
        else
            CHECK(m.note == NULL);
    }
}

static void expect_file_error(const char *fname, const char *text, const char *want)
{
    char path[256], line[1024];
    write_file(fname, text, path, sizeof path);
    struct mp_model m;
    memset(&m, 0, sizeof m);
    CHECK_INT(resolve(path, &m), MP_ERR_USAGE);
    snprintf(line, sizeof line, "t: model file %s%s", path, want);
    CHECK(strncmp(errbuf, line, strlen(line)) == 0);
    if (strncmp(errbuf, line, strlen(line)) != 0)
        fprintf(stderr, "  got:  %s  want: %s...\n", errbuf, line);
    CHECK(strchr(errbuf, '\n') == errbuf + strlen(errbuf) - 1); /* one line */
    CHECK_STR(m.name, ""); /* nothing written on failure */
    unlink(path);
}

static void test_files(void)
{
    char path[256];
    struct mp_model m;

    write_file("my-model.cfg",
               "# a small model\n"
               "  hidden = 1024  \n"
               "ffn=512\n"
               "\n"
               "experts =16 # routed\n"
               "topk=2\n"
               "layers\t=\t4\n",
               path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK_STR(errbuf, "");
    check_model(&m, "my-model", 1024, 512, 16, 2, 0, 4);
    CHECK(m.note == NULL);
    unlink(path);

    /* base is applied first wherever it appears; the other keys override it */
    write_file("b.conf", "hidden=2048\nbase = deepseek-v3\ntopk=6\nname = ds-small\nshared=0\n",
               path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    check_model(&m, "ds-small", 2048, 2048, 256, 6, 0, 58);
    unlink(path);

    /* the memory keys: given, or kept from the base with its non-expert parameters */
    write_file("mem.cfg", "hidden=1024\nffn=512\nexperts=16\ntopk=2\nlayers=4\nparams=1.5e9\n"
               "attn_layers=5\nkv_heads=2\nkv_head_dim=256\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK(m.params == 1.5e9);
    CHECK_INT(m.attn_layers, 5);
    CHECK_INT(m.kv_heads, 2);
    CHECK_INT(m.kv_head_dim, 256);
    CHECK(mp_model_routed_params(&m) == 16.0 * 4 * 3 * 1024 * 512);
    CHECK(mp_model_nonexpert_params(&m) == 1.5e9 - 16.0 * 4 * 3 * 1024 * 512);
    write_file("mem.cfg", "base=qwen3-30b-a3b\nexperts=256\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    /* 30.5B less the 128 · 48 · 3·2048·768 routed, plus 256 such experts */
    CHECK(m.params == 30.5e9 - 128.0 * 48 * 3 * 2048 * 768 + 256.0 * 48 * 3 * 2048 * 768);
    CHECK_INT(m.kv_heads, 4);
    unlink(path);

    write_file("noext", "base=mixtral-8x7b\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    check_model(&m, "noext", 4096, 14336, 8, 2, 0, 32);
    unlink(path);

    write_file("k3.model", "base=seed-k3\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    check_model(&m, "k3", 4096, 2048, 128, 8, 1, 60);
    CHECK(m.note != NULL); /* the preset's caveats still hold */
    write_file("k3.model", "base=seed-k3\nffn=1024\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    check_model(&m, "k3", 4096, 1024, 128, 8, 1, 60);
    CHECK(m.note == NULL);
    unlink(path);

    expect_file_error("m1.txt", "hidden=1\nexperts=4\ntopk=2\nlayers=1\n",
                      ": missing 'ffn' (give it, or start from a preset with base=NAME)\n");
    expect_file_error("m2.txt", "hidden=1\nhiden=5\n",
                      " line 2: unknown key 'hiden' (accepted: name, base, hidden, ffn, experts, "
                      "topk, shared, layers, params, attn_layers, kv_heads, kv_head_dim)\n");
    expect_file_error("m12.txt", "base=mixtral-8x7b\nparams=1e9\n",
                      ": params 1e+09 is smaller than the experts' own 4.51e+10 parameters "
                      "(experts · layers · 3·hidden·ffn, shared included)\n");
    expect_file_error("m13.txt", "base=mixtral-8x7b\nparams=lots\n",
                      " line 2: 'lots' is not a positive number of parameters for 'params' "
                      "(e.g. 671e9)\n");
    expect_file_error("m3.txt", "# x\nhidden=abc\n",
                      " line 2: 'abc' is not a positive integer for 'hidden'\n");
    expect_file_error("m4.txt", "hidden=0\n", " line 1: '0' is not a positive integer for 'hidden'\n");
    expect_file_error("m5.txt", "ffn=12x\n", " line 1: '12x' is not a positive integer for 'ffn'\n");
    expect_file_error("m6.txt", "shared=-1\n",
                      " line 1: '-1' is not a non-negative integer for 'shared'\n");
    expect_file_error("m7.txt", "experts=99999999999\n",
                      " line 1: '99999999999' is not a positive integer for 'experts'\n");
    expect_file_error("m8.txt", "base=mixtral-8x7b\ntopk=12\n",
                      ": topk 12 is larger than the expert count 8\n");
    expect_file_error("m9.txt", "base=gpt-5\n", " line 1: base 'gpt-5' is not a preset (");
    expect_file_error("m10.txt", "hidden=4\nhidden=5\n", " line 2: key 'hidden' appears twice\n");
    expect_file_error("m11.txt", "hidden 4\n", " line 1: expected key=value, got 'hidden 4'\n");

    CHECK_INT(resolve("no-such-model", &m), MP_ERR_USAGE);
    CHECK(strncmp(errbuf, "t: --model: 'no-such-model' is neither a preset (deepseek-v3|kimi-k2|",
                  69) == 0);
    CHECK(strstr(errbuf, "|seed-k3) nor a readable file\n") != NULL);
    CHECK_INT(resolve(dir, &m), MP_ERR_USAGE); /* a directory is not a model file */
    CHECK(strstr(errbuf, "nor a readable file") != NULL);
    CHECK_INT(resolve("", &m), MP_ERR_USAGE);
}

static void test_override(void)
{
    struct mp_model m, orig;
    CHECK_INT(mp_model_resolve("deepseek-v3", &m), MP_OK);
    orig = m;
    CHECK_INT(override(&m, -1, -1, -1, -1, -1, -1), MP_OK);
    CHECK(memcmp(&m, &orig, sizeof m) == 0);
    CHECK_INT(override(&m, 64, 6, 0, 2048, 1024, 3), MP_OK);
    check_model(&m, "deepseek-v3", 2048, 1024, 64, 6, 0, 3);
    /* the non-expert parameters stay (671B less the experts), the new experts' own are added */
    CHECK(mp_model_nonexpert_params(&m) ==
          671e9 - 256.0 * 58 * 3 * 7168 * 2048 - 1.0 * 58 * 3 * 7168 * 2048);
    CHECK(m.params == mp_model_nonexpert_params(&m) + 64.0 * 3 * 3 * 2048 * 1024);

    CHECK_INT(mp_model_resolve("mixtral-8x7b", &m), MP_OK);
    orig = m;
    CHECK_INT(override(&m, -1, 12, -1, -1, -1, -1), MP_ERR_USAGE);
    CHECK_STR(errbuf, "t: --topk: 12 is larger than the expert count 8\n");
    CHECK(memcmp(&m, &orig, sizeof m) == 0); /* unchanged on failure */
    CHECK_INT(override(&m, 4, 6, -1, -1, -1, -1), MP_ERR_USAGE);
    CHECK_STR(errbuf, "t: --topk: 6 is larger than the expert count 4\n");
    CHECK_INT(override(&m, 1, -1, -1, -1, -1, -1), MP_ERR_USAGE);
    CHECK(strncmp(errbuf, "t: --experts: 1 is smaller than the top-k 2", 43) == 0);
    CHECK_INT(override(&m, -1, -1, -1, 0, -1, -1), MP_ERR_USAGE);
    CHECK_STR(errbuf, "t: --hidden: 0 is out of range (>= 1)\n");
    CHECK_INT(override(&m, -1, -1, -2, -1, -1, -1), MP_ERR_USAGE);
    CHECK_STR(errbuf, "t: --shared: -2 is out of range (>= 0)\n");
    CHECK_INT(override(&m, -1, -1, -1, -1, -1, 0), MP_ERR_USAGE);
    CHECK_STR(errbuf, "t: --layers: 0 is out of range (>= 1)\n");
    CHECK(memcmp(&m, &orig, sizeof m) == 0);
    CHECK_INT(override(&m, 8, 8, 2, -1, -1, -1), MP_OK); /* topk == experts is allowed */
    check_model(&m, "mixtral-8x7b", 4096, 14336, 8, 8, 2, 32);
}

static void test_list(void)
{
    char buf[4096];
    mp_model_list(buf, sizeof buf);
    int lines = 0;
    for (const char *p = buf; *p; p++)
        lines += *p == '\n';
    CHECK_INT(lines, NTABLE);
    for (int i = 0; i < NTABLE; i++) {
        char want[160];
        snprintf(want, sizeof want, "H=%d D=%d E=%d K=%d shared=%d layers=%d", table[i].h,
                 table[i].d, table[i].e, table[i].k, table[i].shared, table[i].layers);
        const char *at = strstr(buf, table[i].name);
        CHECK(at != NULL);
        if (at) /* the numbers are on the preset's own line */
            CHECK(strstr(at, want) != NULL && strstr(at, want) < strchr(at, '\n'));
    }
    const char *seed = strstr(buf, "seed-k3");
    CHECK(seed && strstr(seed, "assumptions"));

    char small[10];
    memset(small, 'x', sizeof small);
    mp_model_list(small, sizeof small);
    CHECK_INT(strlen(small), sizeof small - 1);
    CHECK(strncmp(small, "deepseek-", 9) == 0);
}

int main(void)
{
    mp_log_init("t", -1);
    snprintf(dir, sizeof dir, "/tmp/test_model.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_presets();
    test_files();
    test_override();
    test_list();
    rmdir(dir);
    CHECK_DONE();
}
