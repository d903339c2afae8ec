/* test_model.c - unit test of model presets, key=value model files and overrides. */
#include <stdio.h>
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

static char dir[200];
static char errbuf[2048];
static char line_buf[512];

/* deepseek-v3's derived total with another kv_lora_rank. */
static double deepseek_with_kv_lora(int rank)
{
    struct mp_model m;
    if (mp_model_resolve("deepseek-v3", &m) != MP_OK)
        exit(1);
    m.kv_lora_rank = rank;
    return mp_model_total_params(&m);
}

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

/* Every preset describes its attention; its kv_head_dim is the one the fields imply, and the
 * total derived from its shape lies within 3% of the one its model card states. seed-k3 states
 * none (its seed's 2.8T does not fit its shape): its memory follows from the shape alone. */
static void test_totals(void)
{
    printf("%-16s %12s %12s %8s\n", "preset", "derived", "stated", "off");
    for (int i = 0; i < NTABLE; i++) {
        struct mp_model m;
        CHECK_INT(mp_model_resolve(table[i].name, &m), MP_OK);
        CHECK(m.attn != MP_ATTN_NONE);
        CHECK(m.vocab > 0 && m.q_heads > 0);
        CHECK_INT(m.kv_head_dim, mp_model_kv_head_dim(&m));
        CHECK(mp_model_kv_elems(&m) == (double)m.kv_heads * m.kv_head_dim);
        CHECK_INT(m.attn_layers, m.layers + m.dense_layers);
        double total = mp_model_total_params(&m);
        CHECK(mp_model_nonexpert_params(&m) ==
              total - mp_model_routed_params(&m) - mp_model_shared_params(&m));
        if (strcmp(table[i].name, "seed-k3") == 0) {
            CHECK(m.params == 0);
            printf("%-16s %12.4g %12s %8s\n", m.name, total, "-", "-");
            continue;
        }
        double off = total / m.params - 1;
        printf("%-16s %12.4g %12.4g %+7.2f%%\n", m.name, total, m.params, 100 * off);
        CHECK(m.params > 0);
        CHECK(off >= -0.03 && off <= 0.03);
    }

    /* the formulas, written out for one GQA and one MLA preset */
    struct mp_model m;
    CHECK_INT(mp_model_resolve("mixtral-8x7b", &m), MP_OK);
    CHECK(mp_model_attn_params(&m) == 4096.0 * 32 * 128 + 2 * 4096.0 * 8 * 128 + 32 * 128 * 4096.0);
    CHECK(mp_model_embed_params(&m) == 2 * 32000.0 * 4096);
    CHECK(mp_model_dense_params(&m) == 0);
    CHECK(mp_model_total_params(&m) ==
          2 * 32000.0 * 4096 + 32 * mp_model_attn_params(&m) + 8 * 32 * 3.0 * 4096 * 14336 +
              8.0 * 4096 * 32 + 2.0 * 4096 * 32 + 4096);
    CHECK_INT(mp_model_resolve("deepseek-v3", &m), MP_OK);
    CHECK(mp_model_attn_params(&m) == 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 +
                                          512 + 512.0 * 128 * 256 + 128.0 * 128 * 7168);
    CHECK(mp_model_dense_params(&m) == 3 * 3.0 * 7168 * 18432);
    CHECK_INT(mp_model_kv_head_dim(&m), 576);
    m.tied = 1;
    CHECK(mp_model_embed_params(&m) == 129280.0 * 7168);
    m.q_lora_rank = 0; /* queries not compressed: one H·qh·(nope+rope) projection */
    CHECK(mp_model_attn_params(&m) == 7168.0 * 128 * 192 + 7168.0 * 576 + 512 +
                                          512.0 * 128 * 256 + 128.0 * 128 * 7168);
    /* seed-k3: 200B from its shape, 5.5B of them outside the experts */
    CHECK_INT(mp_model_resolve("seed-k3", &m), MP_OK);
    CHECK(mp_model_total_params(&m) > 1.9e11 && mp_model_total_params(&m) < 2.1e11);
    CHECK(mp_model_nonexpert_params(&m) > 5e9 && mp_model_nonexpert_params(&m) < 6e9);
    /* without attention fields: the stated params, or the experts alone */
    m.attn = MP_ATTN_NONE;
    m.params = 0;
    CHECK(mp_model_total_params(&m) == mp_model_routed_params(&m) + mp_model_shared_params(&m));
    CHECK(mp_model_nonexpert_params(&m) == 0);
    m.params = 3e11;
    CHECK(mp_model_total_params(&m) == 3e11);
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
    /* derived: the card's 30.5B was another shape's; the non-expert parameters gain only the
     * 128 more experts' router rows (128 · H · 48) */
    struct mp_model q;
    CHECK_INT(mp_model_resolve("qwen3-30b-a3b", &q), MP_OK);
    CHECK(m.params == 0);
    CHECK(mp_model_nonexpert_params(&m) == mp_model_nonexpert_params(&q) + 128.0 * 2048 * 48);
    CHECK_INT(m.kv_heads, 4);
    CHECK_INT(m.attn, MP_ATTN_GQA);
    /* the base's stated total stays while nothing changes */
    write_file("mem.cfg", "base=qwen3-30b-a3b\nname=q\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK(m.params == 30.5e9);
    unlink(path);

    /* the attention keys, without a base: gqa, dense layers, a tied head, sliding layers */
    write_file("att.cfg", "hidden=1024\nffn=512\nexperts=16\ntopk=2\nlayers=3\nattn=gqa\n"
               "q_heads=16\nkv_heads=4\nhead_dim=64\nattn_layers=4\ndense_layers=1\n"
               "dense_ffn=2048\nvocab=1000\ntied=1\nsliding_layers=2\nsliding_window=64\n",
               path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK_STR(errbuf, "");
    CHECK_INT(m.attn, MP_ATTN_GQA);
    CHECK_INT(m.kv_head_dim, 128); /* 2·head_dim, derived */
    CHECK_INT(m.tied, 1);
    CHECK_INT(m.sliding_layers, 2);
    double att = 1024.0 * 16 * 64 + 2 * 1024.0 * 4 * 64 + 16 * 64 * 1024.0;
    double total = 1000.0 * 1024 + 4 * att + 3.0 * 1024 * 2048 + 16 * 3 * 3.0 * 1024 * 512 +
                   16.0 * 1024 * 3 + 2.0 * 1024 * 4 + 1024;
    CHECK(mp_model_total_params(&m) == total);
    CHECK(mp_model_nonexpert_params(&m) == total - 16 * 3 * 3.0 * 1024 * 512);
    /* mla without a base: one latent head */
    write_file("mla0.cfg", "hidden=1024\nffn=512\nexperts=16\ntopk=2\nlayers=4\nattn=mla\n"
               "attn_layers=4\nq_heads=8\nkv_lora_rank=128\nqk_nope_head_dim=32\n"
               "qk_rope_head_dim=16\nv_head_dim=32\nvocab=1000\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK_STR(errbuf, "");
    CHECK_INT(m.kv_heads, 1);
    CHECK_INT(m.kv_head_dim, 128 + 16);
    CHECK(mp_model_attn_params(&m) == 1024.0 * 8 * 48 + 1024.0 * 144 + 128 + 128.0 * 8 * 64 +
                                          8 * 32 * 1024.0);
    unlink(path);
    /* and mla on a base: kv_heads 1, kv_head_dim kv_lora_rank + qk_rope_head_dim; params within
     * 3% is taken */
    snprintf(line_buf, sizeof line_buf, "base=deepseek-v3\nkv_lora_rank=256\nparams=%.6g\n",
             deepseek_with_kv_lora(256));
    write_file("mla.cfg", line_buf, path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK_STR(errbuf, "");
    CHECK_INT(m.kv_heads, 1);
    CHECK_INT(m.kv_head_dim, 256 + 64);
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
                      "topk, shared, layers, params, attn_layers, kv_heads, kv_head_dim, attn, "
                      "q_heads, head_dim, q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
                      "qk_rope_head_dim, v_head_dim, dense_layers, dense_ffn, vocab, tied, "
                      "sliding_layers, sliding_window)\n");
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

    /* inconsistent attention and step keys */
#define GQA_FILE "hidden=1024\nffn=512\nexperts=16\ntopk=2\nlayers=4\nattn_layers=4\n"
    expect_file_error("a1.txt", GQA_FILE "attn=gqa\nq_heads=16\nkv_heads=3\nhead_dim=64\n",
                      ": kv_heads 3 does not divide q_heads 16\n");
    expect_file_error("a2.txt", GQA_FILE "attn=gqa\nq_heads=16\nkv_heads=4\n",
                      ": attn=gqa needs 'head_dim' (q_heads and head_dim)\n");
    expect_file_error("a3.txt", GQA_FILE "attn=mha\nkv_heads=4\nhead_dim=64\n",
                      ": attn=mha needs 'q_heads' (q_heads and head_dim)\n");
    expect_file_error("a4.txt", GQA_FILE "attn=mha\nq_heads=16\nkv_heads=4\nhead_dim=64\n",
                      ": attn=mha has kv_heads = q_heads, not 4 and 16 (gqa has fewer)\n");
    expect_file_error("a5.txt", "base=mixtral-8x7b\nattn=mla\n",
                      ": attn=mla needs 'kv_lora_rank' (q_heads, kv_lora_rank, qk_rope_head_dim, "
                      "qk_nope_head_dim and v_head_dim)\n");
    expect_file_error("a6.txt", "base=seed-k3\nqk_rope_head_dim=0\n",
                      ": attn=mla needs 'qk_rope_head_dim'");
    expect_file_error("a7.txt", "base=seed-k3\nqk_nope_head_dim=0\n",
                      ": attn=mla needs 'qk_nope_head_dim'");
    expect_file_error("a8.txt", "base=seed-k3\nv_head_dim=0\n", ": attn=mla needs 'v_head_dim'");
    expect_file_error("a9.txt", "base=seed-k3\nkv_heads=2\n",
                      ": kv_heads 2 with attn=mla, which caches one latent head (kv_heads 1)\n");
    expect_file_error("a10.txt", "base=seed-k3\nattn_layers=0\nlayers=1\n",
                      ": attn=mla needs 'attn_layers' (every layer with attention)\n");
    expect_file_error("a11.txt", "base=qwen3-30b-a3b\nkv_head_dim=128\n",
                      ": kv_head_dim 128 is not the 256 that attn=gqa implies (2·head_dim)\n");
    expect_file_error("a12.txt", "base=mixtral-8x7b\ndense_ffn=1024\n",
                      ": 'dense_ffn' without 'dense_layers' (dense layers need both)\n");
    expect_file_error("a13.txt", "base=mixtral-8x7b\ndense_layers=1\n",
                      ": 'dense_layers' without 'dense_ffn' (dense layers need both)\n");
    expect_file_error("a14.txt", "base=mixtral-8x7b\nsliding_layers=33\nsliding_window=128\n",
                      ": sliding_layers 33 is more than attn_layers 32\n");
    expect_file_error("a15.txt", "base=mixtral-8x7b\nsliding_layers=16\n",
                      ": 'sliding_layers' without 'sliding_window'\n");
    expect_file_error("a16.txt", "base=deepseek-v3\nparams=700e9\n",
                      ": params 7e+11 differs from the 6.71e+11 derived from the attention and "
                      "shape keys by more than 3% (params is a check when attn is given)\n");
    expect_file_error("a17.txt", "base=mixtral-8x7b\nattn=sparse\n",
                      " line 2: 'sparse' is not an attention kind for 'attn' (mha, gqa or mla)\n");
    expect_file_error("a18.txt", "base=mixtral-8x7b\ntied=2\n",
                      " line 2: '2' is not 0 or 1 for 'tied'\n");
    /* within 3% is taken, from either side */
    write_file("ok.txt", "base=deepseek-v3\nparams=690e9\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    CHECK(m.params == 690e9);
    write_file("ok.txt", "base=deepseek-v3\nparams=660e9\n", path, sizeof path);
    CHECK_INT(resolve(path, &m), MP_OK);
    unlink(path);

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
    /* the non-expert parameters follow from the fields at the new H and layers; the card's 671B
     * was the old shape's */
    CHECK(m.params == 0);
    CHECK(mp_model_nonexpert_params(&m) ==
          mp_model_total_params(&m) - 64.0 * 3 * 3 * 2048 * 1024);
    CHECK_INT(mp_model_resolve("deepseek-v3", &m), MP_OK);
    CHECK_INT(override(&m, -1, 6, -1, -1, -1, -1), MP_OK); /* top-k alone: the same shape */
    CHECK(m.params == 671e9);
    /* without attention fields the stated non-expert parameters stay, the new experts' own are
     * added */
    CHECK_INT(mp_model_resolve("deepseek-v3", &m), MP_OK);
    m.attn = MP_ATTN_NONE;
    CHECK_INT(override(&m, 64, 6, 0, 2048, 1024, 3), MP_OK);
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
    check_tmpdir(dir, sizeof dir, "test_model");
    test_presets();
    test_totals();
    test_files();
    test_override();
    test_list();
    rmdir(dir);
    CHECK_DONE();
}
