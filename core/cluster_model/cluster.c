/* cluster.c - cluster profiles and the model's equations (see cluster.h, docs/planning.md). */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "text.h"

#define P(field) offsetof(struct mp_cluster, field)
const struct mp_cluster_param mp_cluster_params[] = {
    {"flops", P(flops), "FLOP/s", "dense peak per GPU in the compute type", 0},
    {"hbm_bw", P(hbm_bw), "bytes/s", "device memory bandwidth per GPU", 0},
    {"gpus_per_node", P(gpus_per_node), "GPUs", "GPUs (ranks) per node", 0},
    {"intra_bw", P(intra_bw), "bytes/s", "intra-node bandwidth per GPU per direction", 0},
    {"inter_bw", P(inter_bw), "bytes/s", "inter-node (NIC) bandwidth per GPU per direction", 0},
    {"elem_bytes", P(elem_bytes), "bytes", "bytes per activation and weight element", 0},
    {"flops_eff", P(flops_eff), "fraction", "achieved fraction of the FLOP/s peak", 1},
    {"hbm_eff", P(hbm_eff), "fraction", "achieved fraction of the memory bandwidth", 1},
    {"intra_eff", P(intra_eff), "fraction", "achieved fraction of the intra-node bandwidth", 1},
    {"inter_eff", P(inter_eff), "fraction", "achieved fraction of the inter-node bandwidth", 1},
    {"intra_lat_us", P(intra_lat_us), "µs", "latency of one exchange round inside a node", 1},
    {"inter_lat_us", P(inter_lat_us), "µs", "latency of one exchange round across nodes", 1},
    {"launch_us", P(launch_us), "µs", "overhead per phase, and per active expert of a GEMM loop", 1},
    {"congestion", P(congestion), "-", "γ in 1 + γ·log2(incast flows) on inter-node time", 1},
    {"gpu_mem_gb", P(gpu_mem_gb), "GB", "device memory per GPU (0: not known, not checked)", 0},
    {"mem_reserve", P(mem_reserve), "fraction",
     "share of device memory kept for the runtime, activations and buffers", 0},
    {"flops_fp8", P(flops_fp8), "FLOP/s", "dense peak per GPU of GEMMs on fp8 inputs (optional: "
     "flops when absent)", 0},
    {"ffn_call_us", P(ffn_call_us), "µs", "fixed cost of one fused expert-FFN call (optional: 0)",
     1},
    {"ffn_blend", P(ffn_blend), "fraction", "share of the smaller of the FFN's compute and "
     "weight-load times not hidden under the larger (optional: 0)", 1},
    {"flops_fp8_eff", P(flops_fp8_eff), "fraction", "achieved fraction of the fp8 FLOP/s peak "
     "(optional: flops_eff)", 1},
    {"pcie_bw", P(pcie_bw), "bytes/s", "host-to-device copy bandwidth per GPU per direction, "
     "achieved: what an expert-cache miss fetches at (optional: 0, not known)", 0},
    {"copy_engine", P(copy_engine), "0|1", "1: an expert-cache fetch runs on a copy engine beside "
     "the FFNs (a GPU); 0: on the host before its FFN (optional: 1)", 0},
    {"fused_fp8_eff", P(fused_fp8_eff), "fraction", "achieved fraction of the fp8 FLOP/s peak of "
     "a fused expert-FFN kernel (--gemm grouped, skinny, fused; optional: flops_fp8_eff)", 1},
    {"attn_eff", P(attn_eff), "fraction", "achieved fraction of the FLOP/s peak in attention "
     "kernels (optional: flops_eff)", 0},
    {"kernel_gap_us", P(kernel_gap_us), "µs", "GPU time between two kernels of a step replayed "
     "as a CUDA graph (optional: 0)", 0},
    {"step_host_us", P(step_host_us), "µs", "host cost per step not hidden under the GPU: "
     "scheduling, sampling, the graph's launch (optional: 0)", 0},
    {"exchange_sm_share", P(exchange_sm_share), "fraction", "share of the SMs the high-throughput "
     "exchange kernels hold while two micro-batches overlap them with compute (optional: 0)", 0},
};
const int mp_cluster_nparams = (int)(sizeof mp_cluster_params / sizeof mp_cluster_params[0]);

/* Hardware figures: vendor datasheets (dense, without sparsity; memory: H100 SXM 80 GB, H200 141 GB,
 * H800 SXM 80 GB, A100 SXM4 80 GB, B200 192 GB; docs/planning.md cites them); behaviour figures are
 * fitted to published measurements of real clusters (docs/validation.md, ci/validate) where they
 * exist and starting assumptions that calibration replaces elsewhere. flops_fp8: H100/H200/H800
 * SXM 1979 TFLOP/s (the datasheet's 3958 is with sparsity), HGX B200 4.5 PFLOP/s; the A100 has no
 * fp8 tensor cores, so its profile carries the bf16 rate (fp8 weights then only read fewer bytes).
 * H800: H100's compute and memory with NVLink cut to 400 GB/s (200 GB/s per direction); a 400 Gb/s
 * ConnectX-7 NIC per GPU, as DeepEP's published runs had. congestion 0: a non-blocking fat tree
 * keeps every NIC near line rate at any EP size (DeepEP, NCCL; docs/validation.md); a profile that
 * expects incast to slow a tree sets it. */
/* A step's kernels besides the experts (core/cluster_model/step.c): attention kernels at FlashMLA's published
 * compute-bound rate on H800, 580 of 989 TFLOP/s (deepseek-ai/FlashMLA README, 2025-02-24);
 * 1 µs between two kernels of a CUDA graph's replay and 300 µs of host time per step that the
 * serving loop does not hide (scheduling and sampling overlapped with the previous step, as
 * SGLang's and vLLM's overlap schedulers run them): starting assumptions, checked by the step
 * breakdown's launch part and the whole-step family (docs/validation.md). */
/* The high-throughput exchange kernels (DeepEP's normal kernels: step.h) hold 24 of
 * H800's 132 SMs while they run, the compute stream the other 108 (the figure of DeepSeek's prefill
 * profile, deepseek-ai/profile-data README at 44960242, assets/prefill.jpg: "Computation 108
 * SMs", "Communication 24 SMs"); the low-latency kind frees its SMs while its data is in flight
 * (the same README). Taken as the share for every GPU preset: docs/planning.md, "Two
 * micro-batches". */
#define EXCHANGE_SM_SHARE (24.0 / 132)
#define STEP_BEHAVIOUR .attn_eff = 0.59, .kernel_gap_us = 1, .step_host_us = 300,                  \
                       .exchange_sm_share = EXCHANGE_SM_SHARE
/* the behaviour of the GPU presets but their network's: the FFN fitted to vLLM's fused-MoE kernel
 * on H100 (docs/validation.md), whose Triton w8a8 kernel runs fp8 weights at 0.1 of the fp8 peak
 * (fused_fp8_eff; the slope from 1024 to 4096 tokens, every expert active at both, is that rate,
 * not a fixed cost), and fp8 GEMMs of a library (flops_fp8_eff 0.68) fitted to DeepGEMM's grouped
 * GEMMs on H800 (the README's tables at deepseek-ai/DeepGEMM a9967bc, 2025-04-09); then the network's: NCCL's all-to-all on NDR (H100, H200: 46-49 of
 * 50 GB/s per NIC) and DeepEP's kernels (H800) */
#define FFN_BEHAVIOUR .flops_eff = 0.7, .hbm_eff = 0.85, .launch_us = 4, .congestion = 0,            \
                      .mem_reserve = MP_MEM_RESERVE_DEFAULT, .ffn_call_us = 25, .ffn_blend = 0.5,   \
                      .flops_fp8_eff = 0.68, .fused_fp8_eff = 0.1, STEP_BEHAVIOUR
#define BEHAVIOUR FFN_BEHAVIOUR, .intra_eff = 0.7, .inter_eff = 0.95, .intra_lat_us = 8,              \
                  .inter_lat_us = 20
/* pcie_bw, what an expert-cache fetch achieves from page-locked host memory: about 55 GB/s per
 * direction on a PCIe Gen5 x16 link (H100, H200, H800 and B200 SXM boards' host link; 64 GB/s
 * raw), about 25 GB/s on Gen4 x16 (A100; 32 GB/s raw); a GH200 profile would carry NVLink-C2C's
 * about 450 GB/s. These are starting assumptions for a link no run here measured; ci/gpu-check
 * measures the host-to-device copy rate where a GPU is lent. cpu-host's is a memcpy's: its memory
 * bandwidth halved (a copy reads and writes). */
#define PCIE5 55e9
#define PCIE4 25e9
const struct mp_cluster mp_cluster_presets[] = {
    {.name = "h100-ndr", .flops = 989e12, .hbm_bw = 3.35e12, .gpus_per_node = 8,
     .intra_bw = 450e9, .inter_bw = 50e9, .elem_bytes = 2, .gpu_mem_gb = 80,
     .flops_fp8 = 1979e12, .pcie_bw = PCIE5, .copy_engine = 1, BEHAVIOUR},
    {.name = "h200-ndr", .flops = 989e12, .hbm_bw = 4.8e12, .gpus_per_node = 8,
     .intra_bw = 450e9, .inter_bw = 50e9, .elem_bytes = 2, .gpu_mem_gb = 141,
     .flops_fp8 = 1979e12, .pcie_bw = PCIE5, .copy_engine = 1, BEHAVIOUR},
    /* its network behaviour fitted to DeepEP's published kernels (docs/validation.md) */
    {.name = "h800-ib", .flops = 989e12, .hbm_bw = 3.35e12, .gpus_per_node = 8,
     .intra_bw = 200e9, .inter_bw = 50e9, .elem_bytes = 2, .gpu_mem_gb = 80,
     .flops_fp8 = 1979e12, .pcie_bw = PCIE5, .copy_engine = 1, FFN_BEHAVIOUR, .intra_eff = 0.7,
     .inter_eff = 0.9,
     .intra_lat_us = 20, .inter_lat_us = 20},
    {.name = "a100-hdr", .flops = 312e12, .hbm_bw = 2.0e12, .gpus_per_node = 8,
     .intra_bw = 300e9, .inter_bw = 25e9, .elem_bytes = 2, .gpu_mem_gb = 80,
     .flops_fp8 = 312e12, .pcie_bw = PCIE4, .copy_engine = 1, BEHAVIOUR},
    {.name = "b200-xdr", .flops = 2.25e15, .hbm_bw = 8e12, .gpus_per_node = 8,
     .intra_bw = 900e9, .inter_bw = 100e9, .elem_bytes = 2, .gpu_mem_gb = 192,
     .flops_fp8 = 4.5e15, .pcie_bw = PCIE5, .copy_engine = 1, BEHAVIOUR},
    /* one CPU core per rank (AVX2 FMA fp32, a share of a socket's memory and shared-memory
     * bandwidth, 10 GbE between hosts): a starting point for calibrating CPU runs; its memory is
     * the host's, not checked (gpu_mem_gb 0) */
    {.name = "cpu-host", .flops = 100e9, .hbm_bw = 20e9, .gpus_per_node = 2, .intra_bw = 10e9,
     .inter_bw = 1.25e9, .elem_bytes = 4, .flops_eff = 0.8, .hbm_eff = 0.8, .intra_eff = 0.8,
     .inter_eff = 0.8, .intra_lat_us = 5, .inter_lat_us = 50, .launch_us = 1, .congestion = 0.1,
     .mem_reserve = MP_MEM_RESERVE_DEFAULT, .flops_fp8 = 100e9, .flops_fp8_eff = 0.8,
     .pcie_bw = 10e9, .copy_engine = 0, .fused_fp8_eff = 0.8, .attn_eff = 0.8,
     .kernel_gap_us = 0, .step_host_us = 0, .exchange_sm_share = 0},
};
const int mp_cluster_npresets = (int)(sizeof mp_cluster_presets / sizeof mp_cluster_presets[0]);

double *mp_cluster_param_ptr(struct mp_cluster *c, int i)
{
    return i == 2 ? NULL : (double *)((char *)c + mp_cluster_params[i].offset);
}

static double get(const struct mp_cluster *c, int i)
{
    const char *base = (const char *)c + mp_cluster_params[i].offset;
    return i == 2 ? (double)*(const int *)base : *(const double *)base;
}

static int set(struct mp_cluster *c, int i, double v)
{
    char *base = (char *)c + mp_cluster_params[i].offset;
    if (i == 2) {
        if (v != floor(v) || v < 1 || v > 1e6)
            return -1;
        *(int *)base = (int)v;
    } else {
        *(double *)base = v;
    }
    return 0;
}

int mp_cluster_validate(const struct mp_cluster *c, const char *what)
{
    for (int i = 0; i < mp_cluster_nparams; i++) {
        const char *k = mp_cluster_params[i].key;
        double v = get(c, i);
        int ok = isfinite(v);
        int zero_ok = strstr(k, "_lat") || !strcmp(k, "launch_us") || !strcmp(k, "congestion") ||
                      !strcmp(k, "gpu_mem_gb") || !strcmp(k, "ffn_call_us") ||
                      !strcmp(k, "pcie_bw") || !strcmp(k, "kernel_gap_us") ||
                      !strcmp(k, "step_host_us");
        if (strstr(k, "_eff"))
            ok = ok && v > 0 && v <= 1;
        else if (!strcmp(k, "copy_engine"))
            ok = ok && (v == 0 || v == 1);
        else if (!strcmp(k, "ffn_blend"))
            ok = ok && v >= 0 && v <= 1;
        else if (!strcmp(k, "mem_reserve") || !strcmp(k, "exchange_sm_share"))
            ok = ok && v >= 0 && v < 1;
        else if (zero_ok)
            ok = ok && v >= 0;
        else
            ok = ok && v > 0;
        if (!ok) {
            mp_usage("%s: %s = %g is out of range (%s)", what, k, v,
                     strstr(k, "_eff")              ? "a fraction in (0, 1]"
                     : !strcmp(k, "ffn_blend")      ? "a fraction in [0, 1]"
                     : !strcmp(k, "mem_reserve") || !strcmp(k, "exchange_sm_share")
                         ? "a fraction in [0, 1)"
                     : !strcmp(k, "copy_engine")    ? "0 or 1"
                     : zero_ok                      ? ">= 0"
                                                    : "> 0");
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

static int find_preset(const char *name, struct mp_cluster *out)
{
    for (int i = 0; i < mp_cluster_npresets; i++)
        if (!strcmp(mp_cluster_presets[i].name, name)) {
            *out = mp_cluster_presets[i];
            return 1;
        }
    return 0;
}


/* Read `val` for parameter key `key` (line ln of path) into c; seen[idx] marks it. MP_OK, or
 * MP_ERR_USAGE after a message naming the file, the line, the key and what it accepts. */
static int cluster_file_param(const char *path, int ln, const char *key, const char *val,
                              struct mp_cluster *c, int *seen)
{
    int idx = -1;
    for (int i = 0; i < mp_cluster_nparams; i++)
        if (!strcmp(mp_cluster_params[i].key, key))
            idx = i;
    if (idx < 0) {
        char keys[512] = "name, base";
        for (int i = 0; i < mp_cluster_nparams; i++)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), ", %s",
                     mp_cluster_params[i].key);
        mp_usage("cluster file %s line %d: unknown key '%s' (accepted: %s)", path, ln, key, keys);
        return MP_ERR_USAGE;
    }
    if (seen[idx]) { /* the last would win without a word */
        mp_usage("cluster file %s line %d: key '%s' appears twice", path, ln, key);
        return MP_ERR_USAGE;
    }
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (!*val || *end || errno || !isfinite(v) || set(c, idx, v) != 0) {
        mp_usage("cluster file %s line %d: '%s' is not a valid number for '%s' (%s)", path, ln,
                 val, key, mp_cluster_params[idx].unit);
        return MP_ERR_USAGE;
    }
    seen[idx] = 1;
    return MP_OK;
}

/* Read f's key=value lines into c: the base preset first (pass 0, so keys may come in any order),
 * then every parameter (pass 1); the name into name[64]; *has_base set when a base was given. */
static int cluster_file_lines(FILE *f, const char *path, struct mp_cluster *c, int *seen,
                              int *has_base, char *name)
{
    char line[1024];
    int rc = MP_OK, dup[2] = {0, 0}; /* base and name seen */
    for (int pass = 0; pass < 2 && rc == MP_OK; pass++) {
        rewind(f);
        for (int ln = 1; fgets(line, sizeof line, f) && rc == MP_OK; ln++) {
            char *key, *val;
            int kv = mp_kv_split(line, &key, &val);
            if (kv == 0)
                continue;
            if (kv < 0) {
                mp_usage("cluster file %s line %d: expected key=value", path, ln);
                return MP_ERR_USAGE;
            }
            if (pass == 0 && (!strcmp(key, "base") || !strcmp(key, "name"))) {
                int *once = !strcmp(key, "base") ? &dup[0] : &dup[1];
                if (*once) {
                    mp_usage("cluster file %s line %d: key '%s' appears twice", path, ln, key);
                    return MP_ERR_USAGE;
                }
                *once = 1;
            }
            if (!strcmp(key, "base")) {
                if (pass == 0 && !find_preset(val, c)) {
                    mp_usage("cluster file %s line %d: base '%s' is not a preset", path, ln, val);
                    rc = MP_ERR_USAGE;
                }
                *has_base = 1;
            } else if (!strcmp(key, "name")) {
                snprintf(name, 64, "%s", val);
            } else if (pass == 1) {
                rc = cluster_file_param(path, ln, key, val, c, seen);
            }
        }
    }
    return rc;
}

/* The default of optional parameter i, set in c when a file without a base leaves it out; 0 when
 * the parameter is required. The memory keys: memory unknown, the default reserve; flops_fp8: a
 * profile without an fp8 rate runs fp8 at bf16's; the efficiencies that follow another (NAN here)
 * are filled once it is read. */
static int cluster_optional(struct mp_cluster *c, int i)
{
    size_t off = mp_cluster_params[i].offset;
    if (!strcmp(mp_cluster_params[i].key, "gpu_mem_gb"))
        c->gpu_mem_gb = 0;
    else if (!strcmp(mp_cluster_params[i].key, "mem_reserve"))
        c->mem_reserve = MP_MEM_RESERVE_DEFAULT;
    else if (off == P(flops_fp8))
        c->flops_fp8 = c->flops;
    else if (off == P(ffn_call_us) || off == P(ffn_blend) || off == P(pcie_bw) ||
             off == P(kernel_gap_us) || off == P(step_host_us) || off == P(exchange_sm_share))
        *(double *)((char *)c + off) = 0;
    else if (off == P(copy_engine))
        c->copy_engine = 1;
    else if (off == P(flops_fp8_eff))
        c->flops_fp8_eff = NAN; /* flops_eff's, once it is read */
    else if (off == P(fused_fp8_eff))
        c->fused_fp8_eff = NAN; /* flops_fp8_eff's, once that is known */
    else if (off == P(attn_eff))
        c->attn_eff = NAN; /* flops_eff's, once it is read */
    else
        return 0;
    return 1;
}

static int read_file(const char *path, struct mp_cluster *out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        char names[256] = "";
        for (int i = 0; i < mp_cluster_npresets; i++) {
            if (i)
                strcat(names, "|");
            strcat(names, mp_cluster_presets[i].name);
        }
        mp_usage("--cluster: '%s' is neither a preset (%s) nor a readable file: %s", path, names,
                 strerror(errno));
        return MP_ERR_USAGE;
    }
    struct mp_cluster c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < mp_cluster_nparams; i++)
        set(&c, i, NAN);
    c.gpus_per_node = 0;
    int seen[32] = {0}, has_base = 0;
    char name[64] = "";
    int rc = cluster_file_lines(f, path, &c, seen, &has_base, name);
    fclose(f);
    if (rc != MP_OK)
        return rc;
    for (int i = 0; i < mp_cluster_nparams && !has_base; i++) {
        if (!seen[i] && !cluster_optional(&c, i)) {
            mp_usage("cluster file %s: missing '%s' (%s; or start from a preset with base=NAME)",
                     path, mp_cluster_params[i].key, mp_cluster_params[i].meaning);
            return MP_ERR_USAGE;
        }
    }
    if (isnan(c.flops_fp8_eff))
        c.flops_fp8_eff = c.flops_eff;
    if (isnan(c.fused_fp8_eff))
        c.fused_fp8_eff = c.flops_fp8_eff;
    if (isnan(c.attn_eff))
        c.attn_eff = c.flops_eff;
    if (name[0])
        snprintf(c.name, sizeof c.name, "%s", name);
    else
        mp_file_stem(path, c.name, sizeof c.name);
    char what[1100];
    snprintf(what, sizeof what, "cluster file %s", path);
    rc = mp_cluster_validate(&c, what);
    if (rc == MP_OK)
        *out = c;
    return rc;
}

int mp_cluster_resolve(const char *spec, struct mp_cluster *out)
{
    if (!spec || !*spec) {
        char names[256] = "";
        for (int i = 0; i < mp_cluster_npresets; i++)
            if (strlen(names) + strlen(mp_cluster_presets[i].name) + 3 < sizeof names) {
                strcat(names, mp_cluster_presets[i].name);
                strcat(names, ", ");
            }
        mp_usage("--cluster: a preset or profile file is needed (%sor a key=value file)", names);
        return MP_ERR_USAGE;
    }
    if (find_preset(spec, out))
        return MP_OK;
    return read_file(spec, out);
}

int mp_cluster_write(const struct mp_cluster *c, FILE *f)
{
    fprintf(f, "# moeperf cluster profile\nname = %s\n", c->name);
    for (int i = 0; i < mp_cluster_nparams; i++)
        fprintf(f, "%-14s = %.9g    # %s, %s%s\n", mp_cluster_params[i].key, get(c, i),
                mp_cluster_params[i].unit, mp_cluster_params[i].meaning,
                mp_cluster_params[i].fit ? " (fitted)" : "");
    return ferror(f) ? MP_ERR_RUNTIME : MP_OK;
}

/* ---- equations ---- */

double mp_cost_roofline_us(const struct mp_cluster *c, double flops, double rate, double bytes)
{
    double compute = flops / rate * 1e6, memory = bytes / (c->hbm_bw * c->hbm_eff) * 1e6;
    double hi = compute > memory ? compute : memory, lo = compute > memory ? memory : compute;
    return hi + c->ffn_blend * lo;
}

double mp_cost_ffn_us(const struct mp_cluster *c, double flops, double weight_bytes, int active,
                       int gemm)
{
    if (active <= 0 && flops <= 0)
        return 0;
    /* docs/planning.md, "Expert FFN": the roofline, smoothed by β where compute and weight loads
     * are close, plus the launches of a GEMM loop or the fixed cost of one fused call */
    double fixed = gemm == MP_GEMM_LOOP ? c->launch_us * active : c->ffn_call_us;
    return mp_cost_roofline_us(c, flops, c->flops * c->flops_eff, weight_bytes) + fixed;
}

void mp_cost_ffn_prepare(const struct mp_cluster *c, int H, int Dl, int weight_dtype, int gemm,
                         struct mp_ffn_cost *f)
{
    /* docs/planning.md, the model's equations: the FFN's roofline, fp8 GEMMs at flops_fp8 */
    f->c = c;
    f->flops_per_row = 6.0 * H * (double)Dl;
    f->expert_bytes = mp_expert_weight_bytes((enum mp_dtype)weight_dtype, H, Dl, c->elem_bytes);
    if (weight_dtype == MP_DTYPE_FP8)
        f->rate = c->flops_fp8 * (gemm == MP_GEMM_LOOP ? c->flops_fp8_eff : c->fused_fp8_eff);
    else
        f->rate = c->flops * c->flops_eff;
    f->gemm = gemm;
}

double mp_cost_ffn_prepared_us(const struct mp_ffn_cost *f, double rows, int active)
{
    /* mp_cost_ffn_us at rate f->rate: the roofline plus the launches or the fused call */
    const struct mp_cluster *c = f->c;
    double flops = f->flops_per_row * rows;
    if (active <= 0 && flops <= 0)
        return 0;
    double fixed = f->gemm == MP_GEMM_LOOP ? c->launch_us * active : c->ffn_call_us;
    return mp_cost_roofline_us(c, flops, f->rate, active * f->expert_bytes) + fixed;
}

double mp_cost_expert_ffn_us(const struct mp_cluster *c, int H, int Dl, double rows, int active,
                              int weight_dtype, int gemm)
{
    struct mp_ffn_cost f;
    mp_cost_ffn_prepare(c, H, Dl, weight_dtype, gemm, &f);
    return mp_cost_ffn_prepared_us(&f, rows, active);
}

double mp_cost_exchange_us(const struct mp_cluster *c, double intra_max_bytes,
                            double inter_max_bytes, int uses_intra, int uses_inter, int incast)
{
    double intra = uses_intra ? c->intra_lat_us + intra_max_bytes / (c->intra_bw * c->intra_eff) * 1e6
                              : 0;
    double inter = 0;
    if (uses_inter) {
        double cong = 1 + c->congestion * log2(incast > 1 ? incast : 1);
        inter = c->inter_lat_us + inter_max_bytes / (c->inter_bw * c->inter_eff) * 1e6 * cong;
    }
    return intra > inter ? intra : inter;
}

void mp_cost_allreduce_prepare(const struct mp_cluster *c, int tp, struct mp_allreduce_cost *a)
{
    int inside = tp <= c->gpus_per_node;
    a->tp = tp;
    a->lat2 = 2.0 * (inside ? c->intra_lat_us : c->inter_lat_us);
    a->share = 2.0 * (tp - 1) / tp;
    a->bw = inside ? c->intra_bw * c->intra_eff : c->inter_bw * c->inter_eff;
}

double mp_cost_allreduce_prepared_us(const struct mp_allreduce_cost *a, double bytes)
{
    /* 2·lat + 2·(tp − 1)/tp · bytes / bw, in the order of its terms */
    return a->tp <= 1 ? 0 : a->lat2 + a->share * bytes / a->bw * 1e6;
}

double mp_cost_allreduce_us(const struct mp_cluster *c, double bytes, int tp)
{
    struct mp_allreduce_cost a;
    mp_cost_allreduce_prepare(c, tp, &a);
    return mp_cost_allreduce_prepared_us(&a, bytes);
}

double mp_cost_pipeline_us(int nchunks, const double *dispatch_us, const double *combine_us,
                            const double *compute_us, int nranks, double *rank_end)
{
    if (nchunks < 1)
        return 0;
    for (int p = 0; p < nranks; p++)
        rank_end[p] = 0;
    double net = dispatch_us[0]; /* the network is free from here on */
    double dispatched = net;     /* end of dispatch k, the chunk about to compute */
    for (int k = 0; k < nchunks; k++) {
        double next = dispatched;
        if (k + 1 < nchunks) { /* dispatch k+1 is queued ahead of combine k */
            net += dispatch_us[k + 1];
            next = net;
        }
        double everyone = 0; /* combine k needs every rank's compute k */
        for (int p = 0; p < nranks; p++) {
            double start = rank_end[p] > dispatched ? rank_end[p] : dispatched;
            rank_end[p] = start + compute_us[(size_t)k * nranks + p];
            everyone = rank_end[p] > everyone ? rank_end[p] : everyone;
        }
        net = (net > everyone ? net : everyone) + combine_us[k];
        dispatched = next;
    }
    return net;
}
