/* test_cluster.c - cluster profiles (presets, files, refusals) and the model's equations on
 * hand-computed values. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "cluster.h"
#include "dtype.h"
#include "error.h"

static char dir[64];

static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

int main(void)
{
    mp_log_init("test_cluster", -1);
    snprintf(dir, sizeof dir, "/tmp/moeperf-cluster.XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    struct mp_cluster c;

    /* presets carry the public figures docs/planning.md cites */
    CHECK_INT(mp_cluster_resolve("h100-ndr", &c), MP_OK);
    CHECK_NEAR(c.flops, 989e12, 1e-12);
    CHECK_NEAR(c.hbm_bw, 3.35e12, 1e-12);
    CHECK_NEAR(c.flops_fp8, 1979e12, 1e-12); /* dense: the datasheet's 3958 is with sparsity */
    CHECK_NEAR(c.intra_bw, 450e9, 1e-12);
    CHECK_NEAR(c.inter_bw, 50e9, 1e-12); /* 400 Gb/s */
    CHECK_INT(c.gpus_per_node, 8);
    CHECK_INT(mp_cluster_resolve("h200-ndr", &c), MP_OK);
    CHECK_NEAR(c.hbm_bw, 4.8e12, 1e-12);
    CHECK_NEAR(c.flops_fp8, 1979e12, 1e-12);
    CHECK_INT(mp_cluster_resolve("a100-hdr", &c), MP_OK);
    CHECK_NEAR(c.flops, 312e12, 1e-12);
    CHECK_NEAR(c.flops_fp8, 312e12, 1e-12); /* no fp8 tensor cores: the bf16 rate */
    CHECK_NEAR(c.inter_bw, 25e9, 1e-12);
    CHECK_INT(mp_cluster_resolve("b200-xdr", &c), MP_OK);
    CHECK_NEAR(c.flops, 2.25e15, 1e-12);
    CHECK_NEAR(c.intra_bw, 900e9, 1e-12);
    /* device memory per GPU (datasheets) and the 10% reserve */
    static const struct {
        const char *name;
        double gb;
    } mem[] = {{"h100-ndr", 80}, {"h200-ndr", 141}, {"a100-hdr", 80}, {"b200-xdr", 192}};
    for (int i = 0; i < 4; i++) {
        CHECK_INT(mp_cluster_resolve(mem[i].name, &c), MP_OK);
        CHECK_NEAR(c.gpu_mem_gb, mem[i].gb, 0);
        CHECK_NEAR(c.mem_reserve, 0.1, 0);
    }
    CHECK_NEAR(c.flops_fp8, 4.5e15, 1e-12);
    for (int i = 0; i < mp_cluster_npresets; i++)
        CHECK_INT(mp_cluster_validate(&mp_cluster_presets[i], "preset"), MP_OK);

    /* a file from a base, in any key order; then a round trip through mp_cluster_write */
    const char *p = write_file("a.ini", "# test\nhbm_eff = 0.5\nbase = a100-hdr\nname = lab\n"
                                        "congestion=0\n");
    CHECK_INT(mp_cluster_resolve(p, &c), MP_OK);
    CHECK_STR(c.name, "lab");
    CHECK_NEAR(c.hbm_eff, 0.5, 0);
    CHECK_NEAR(c.flops, 312e12, 1e-12);
    CHECK_NEAR(c.congestion, 0, 0);
    char out[256];
    snprintf(out, sizeof out, "%s/written.ini", dir);
    FILE *f = fopen(out, "w");
    CHECK_INT(mp_cluster_write(&c, f), MP_OK);
    fclose(f);
    struct mp_cluster back;
    CHECK_INT(mp_cluster_resolve(out, &back), MP_OK);
    CHECK_NEAR(back.hbm_eff, 0.5, 1e-9);
    CHECK_NEAR(back.inter_bw, c.inter_bw, 1e-9);
    CHECK_INT(back.gpus_per_node, c.gpus_per_node);
    CHECK_NEAR(back.gpu_mem_gb, 80, 0);
    CHECK_NEAR(back.flops_fp8, c.flops_fp8, 1e-9);
    /* without base the memory keys may be left out (not checked, the default reserve) */
    CHECK_INT(mp_cluster_resolve(write_file("nomem.ini",
                                            "flops=1e12\nhbm_bw=1e12\ngpus_per_node=2\n"
                                            "intra_bw=1e9\ninter_bw=1e9\nelem_bytes=2\n"
                                            "flops_eff=1\nhbm_eff=1\nintra_eff=1\ninter_eff=1\n"
                                            "intra_lat_us=1\ninter_lat_us=1\nlaunch_us=1\n"
                                            "congestion=0\n"),
                                 &c),
              MP_OK);
    CHECK_NEAR(c.gpu_mem_gb, 0, 0);
    CHECK_NEAR(c.mem_reserve, 0.1, 0);
    CHECK_NEAR(c.copy_engine, 1, 0); /* absent: a GPU's copy engine */
    CHECK_INT(mp_cluster_resolve(write_file("r.ini", "base=h100-ndr\nmem_reserve=1\n"), &c),
              MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("ce.ini", "base=h100-ndr\ncopy_engine=0.5\n"), &c),
              MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("ce0.ini", "base=h100-ndr\ncopy_engine=0\n"), &c),
              MP_OK);
    CHECK_NEAR(c.copy_engine, 0, 0);
    CHECK_INT(mp_cluster_resolve("cpu-host", &c), MP_OK);
    CHECK_NEAR(c.copy_engine, 0, 0);
    CHECK_INT(mp_cluster_resolve(write_file("g.ini", "base=h100-ndr\ngpu_mem_gb=-1\n"), &c),
              MP_ERR_USAGE);
    /* a file without a base and without flops_fp8 (written before it): fp8 at the bf16 rate */
    CHECK_INT(mp_cluster_resolve(write_file("nofp8.ini", "flops=2e12\nhbm_bw=1e12\n"
                                                         "gpus_per_node=4\nintra_bw=1e9\n"
                                                         "inter_bw=1e8\nelem_bytes=2\n"
                                                         "flops_eff=1\nhbm_eff=1\nintra_eff=1\n"
                                                         "inter_eff=1\nintra_lat_us=1\n"
                                                         "inter_lat_us=1\nlaunch_us=0\n"
                                                         "congestion=0\n"), &c), MP_OK);
    CHECK_NEAR(c.flops_fp8, 2e12, 0);

    /* refusals: negative, missing, unknown, out-of-range efficiency, non-numeric, unreadable */
    CHECK_INT(mp_cluster_resolve(write_file("n.ini", "base=h100-ndr\ninter_bw=-5\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("m.ini", "flops=1e12\nhbm_bw=1e12\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("u.ini", "base=h100-ndr\nwarp=9\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("e.ini", "base=h100-ndr\nhbm_eff=1.5\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("x.ini", "base=h100-ndr\nflops=fast\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("g.ini", "base=h100-ndr\ngpus_per_node=2.5\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve(write_file("b.ini", "base=h900\n"), &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve("/nonexistent/profile.ini", &c), MP_ERR_USAGE);
    CHECK_INT(mp_cluster_resolve("", &c), MP_ERR_USAGE);

    /* equations, on a profile with round numbers */
    struct mp_cluster r = {.flops = 1e12, .hbm_bw = 1e9, .gpus_per_node = 4, .intra_bw = 1e9,
                           .inter_bw = 1e8, .elem_bytes = 2, .flops_eff = 0.5, .hbm_eff = 0.5,
                           .intra_eff = 1, .inter_eff = 0.5, .intra_lat_us = 10,
                           .inter_lat_us = 20, .launch_us = 3, .congestion = 1};
    /* memory-bound: 1e6 bytes / 0.5e9 = 2000 µs > 1e6 FLOP / 0.5e12 = 2 µs; + 3 µs × 2 experts */
    CHECK_NEAR(mp_cost_ffn_us(&r, 1e6, 1e6, 2, MP_GEMM_LOOP), 2006, 1e-12);
    /* compute-bound: 2e9 FLOP / 0.5e12 = 4000 µs > 2000 µs */
    CHECK_NEAR(mp_cost_ffn_us(&r, 2e9, 1e6, 2, MP_GEMM_LOOP), 4006, 1e-12);
    /* a fused call pays ffn_call_us once, not a launch per expert; β adds its share of the
     * smaller time: 4000 + 0.25·2000 + 7 */
    r.ffn_call_us = 7;
    r.ffn_blend = 0.25;
    CHECK_NEAR(mp_cost_ffn_us(&r, 2e9, 1e6, 2, MP_GEMM_GROUPED), 4507, 1e-12);
    CHECK_NEAR(mp_cost_ffn_us(&r, 2e9, 1e6, 2, MP_GEMM_SKINNY), 4507, 1e-12);
    CHECK_NEAR(mp_cost_ffn_us(&r, 2e9, 1e6, 2, MP_GEMM_LOOP), 4506, 1e-12);
    r.ffn_call_us = r.ffn_blend = 0;
    /* the expert FFN in bf16 and fp8 (H 256, Dl 128, 2 experts): bf16 reads 3·256·128·2 bytes
     * each, fp8 3·256·128 codes + 4·3·(2·1) scale bytes each and computes at flops_fp8 with its
     * own efficiency */
    r.flops_fp8 = 4e12;
    r.flops_fp8_eff = 0.25;
    double fl = 6.0 * 256 * 128 * 1e4; /* 1e4 rows: compute-bound in both */
    CHECK_NEAR(mp_cost_expert_ffn_us(&r, 256, 128, 1e4, 2, MP_DTYPE_BF16, MP_GEMM_LOOP),
               fl / 0.5e12 * 1e6 + 6, 1e-9);
    CHECK_NEAR(mp_cost_expert_ffn_us(&r, 256, 128, 1e4, 2, MP_DTYPE_FP8, MP_GEMM_LOOP),
               fl / 1e12 * 1e6 + 6, 1e-9);
    /* one row: memory-bound, the weight bytes over 0.5e9 B/s */
    CHECK_NEAR(mp_cost_expert_ffn_us(&r, 256, 128, 1, 2, MP_DTYPE_BF16, MP_GEMM_LOOP),
               2.0 * 3 * 256 * 128 * 2 / 0.5e9 * 1e6 + 6, 1e-9);
    CHECK_NEAR(mp_cost_expert_ffn_us(&r, 256, 128, 1, 2, MP_DTYPE_FP8, MP_GEMM_LOOP),
               2.0 * (3 * 256 * 128 + 4 * 3 * 2) / 0.5e9 * 1e6 + 6, 1e-9);
    /* intra only: 10 + 1e6 / 1e9 s = 1010 µs */
    CHECK_NEAR(mp_cost_exchange_us(&r, 1e6, 0, 1, 0, 1), 1010, 1e-12);
    /* inter with incast 4: 20 + 1e5 / 0.5e8 s × (1 + log2 4) = 20 + 2000 × 3 */
    CHECK_NEAR(mp_cost_exchange_us(&r, 0, 1e5, 0, 1, 4), 6020, 1e-12);
    /* both classes run at once: the larger counts */
    CHECK_NEAR(mp_cost_exchange_us(&r, 1e6, 1e5, 1, 1, 4), 6020, 1e-12);
    /* ring allreduce, 4 ranks in a node: 2·10 + 2·3/4·1e6/1e9 s = 20 + 1500 */
    CHECK_NEAR(mp_cost_allreduce_us(&r, 1e6, 4), 1520, 1e-12);
    CHECK_NEAR(mp_cost_allreduce_us(&r, 1e6, 1), 0, 0);
    /* 8 ranks span two nodes: the inter-node link, 2·20 + 2·7/8·1e6/0.5e8 s */
    CHECK_NEAR(mp_cost_allreduce_us(&r, 1e6, 8), 40 + 35000, 1e-12);

    /* the pipeline schedule (docs/planning.md, pipelined layers); one chunk: D0 + slowest + C0 */
    double rank_end[2];
    double d1[] = {10}, c1[] = {5}, p1[] = {3, 7};
    CHECK_NEAR(mp_cost_pipeline_us(1, d1, c1, p1, 2, rank_end), 22, 0);
    /* two equal chunks on one rank: D0 0–10, D1 10–20 beside F0 10–20, C0 20–30 beside
     * F1 20–30, C1 30–40 (unpipelined 60) */
    double d2[] = {10, 10}, c2[] = {10, 10}, p2[] = {10, 10};
    CHECK_NEAR(mp_cost_pipeline_us(2, d2, c2, p2, 1, rank_end), 40, 0);
    /* FIFO in the order D0 D1 C0 D2 C1 C2: D2 queues behind C0, which waits for a long F0.
     * D0 0–1, D1 1–2, F0 1–11, C0 11–12, D2 12–13, F1 11–12, C1 13–14, F2 13–14, C2 14–15
     * (sending D2 before C0 would end at 14) */
    double d3[] = {1, 1, 1}, c3[] = {1, 1, 1}, p3[] = {10, 1, 1};
    CHECK_NEAR(mp_cost_pipeline_us(3, d3, c3, p3, 1, rank_end), 15, 0);
    /* a combine waits for every rank: F0 ends 7 (rank 0) and 3 (rank 1), C0 7–8; F1 rank 0
     * 7–8, rank 1 4–9; C1 9–10 */
    double d4[] = {2, 2}, c4[] = {1, 1}, p4[] = {5, 1, 1, 5};
    CHECK_NEAR(mp_cost_pipeline_us(2, d4, c4, p4, 2, rank_end), 10, 0);
    CHECK_NEAR(rank_end[0], 8, 0);
    CHECK_NEAR(rank_end[1], 9, 0);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_INT(system(cmd), 0);
    CHECK_DONE();
}
