/* cluster.h - cluster profiles for the model backends: per-GPU compute and memory rates, the two
 * link classes (intra-node, inter-node), efficiencies and a congestion term; presets from public
 * figures and key=value profile files (docs/planning.md gives each figure's meaning and source). */
#ifndef MP_CLUSTER_H
#define MP_CLUSTER_H

#include <stdio.h>

struct mp_cluster {
    char name[64];
    /* hardware (peak figures) */
    double flops;         /* dense FLOP/s per GPU in the compute type (bf16) */
    double hbm_bw;        /* device memory bytes/s per GPU */
    int gpus_per_node;
    double intra_bw;      /* bytes/s per GPU per direction inside a node (NVLink) */
    double inter_bw;      /* bytes/s per GPU per direction across nodes (its NIC) */
    double elem_bytes;    /* bytes per activation/weight element (2 for bf16) */
    /* fitted or assumed behaviour */
    double flops_eff, hbm_eff, intra_eff, inter_eff; /* achieved fraction of each peak, (0, 1] */
    double intra_lat_us, inter_lat_us; /* per exchange round on each link class */
    double launch_us;     /* per phase, and per active expert of an FFN run as a GEMM loop */
    double congestion;    /* γ: inter-node time × (1 + γ·log2(incast flows)), ≥ 0 */
    /* memory (hardware facts; never fitted) */
    double gpu_mem_gb;    /* device memory per GPU, GB (1e9 bytes); 0: not known, not checked */
    double mem_reserve;   /* share of it kept for the runtime, activations and communication
                             buffers, [0, 1) */
    /* hardware, optional in a file (the bf16 rate when absent): dense FLOP/s per GPU of a GEMM on
     * fp8 inputs, the rate of the expert FFN with --weight-dtype fp8 */
    double flops_fp8;
    /* behaviour, optional in a file: the fixed cost of one fused expert-FFN call (--gemm grouped
     * or skinny: sorting, top-k, launches; default 0), the share β of the smaller of an FFN's
     * compute and weight-load times that does not hide under the larger (default 0: the plain
     * roofline), and the achieved fraction of flops_fp8 (default flops_eff) */
    double ffn_call_us, ffn_blend, flops_fp8_eff;
    /* hardware, optional in a file (0: not known): bytes/s per GPU per direction from host memory
     * into device memory, what an --expert-cache miss moves its expert's weights at */
    double pcie_bw;
    /* hardware, optional in a file (1 when absent): 1 where an --expert-cache fetch runs on a copy
     * engine beside the FFNs (a GPU's copy stream: only the part not hidden under the FFNs before
     * it is exposed), 0 where the host copies before the expert's FFN (the cpu backend) */
    double copy_engine;
    /* behaviour, optional in a file: the achieved fraction of flops_fp8 of a fused expert-FFN
     * kernel on fp8 weights (--gemm grouped, skinny, fused: one call for every expert, as vLLM's
     * Triton w8a8 kernel; flops_fp8_eff is then the rate of a GEMM library's kernels, DeepGEMM and
     * cuBLASLt: --gemm loop and every GEMM of a step besides the experts; default flops_fp8_eff) */
    double fused_fp8_eff;
    /* A whole step (core/cluster_model/step.c, docs/planning.md "What a step includes"), optional in a file:
     * the achieved fraction of the bf16 FLOP/s peak in attention kernels (FlashAttention and
     * FlashMLA: softmax and rescaling between their two GEMMs; default flops_eff); the GPU time
     * between two kernels of a step replayed as a CUDA graph (default 0); and the host's cost per
     * step that a serving loop does not hide under the GPU (scheduling, sampling, the graph's
     * launch; default 0) */
    double attn_eff, kernel_gap_us, step_host_us;
    /* A step of two micro-batches, optional in a file (default 0): the share of the SMs the
     * high-throughput exchange kernels (as DeepEP's normal kernels: every exchange but a decode
     * step's pair dispatch) hold while they run, which the other micro-batch's compute then runs
     * without (step.h, mp_step_time) */
    double exchange_sm_share;
};

/* The parameters calibration may fit, by name, with their place in the struct. */
struct mp_cluster_param {
    const char *key;
    size_t offset;
    const char *unit;
    const char *meaning;
    int fit; /* 1: a behaviour parameter calibration adjusts; 0: a hardware fact */
};
extern const struct mp_cluster_param mp_cluster_params[];
extern const int mp_cluster_nparams;

/* The presets' mem_reserve: 10% of device memory kept outside weights and KV cache, as vLLM's default
 * gpu_memory_utilization of 0.9 leaves. */
#define MP_MEM_RESERVE_DEFAULT 0.1

extern const struct mp_cluster mp_cluster_presets[];
extern const int mp_cluster_npresets;

/* Resolve `spec`: a preset name, or a key=value file ("base=NAME" starts from a preset; '#'
 * comments; keys as in mp_cluster_params plus name and base). Unknown keys, missing or negative or
 * non-numeric values and efficiencies outside (0, 1] print one line naming --cluster or the file and
 * line, and return MP_ERR_USAGE. A file without base may leave out gpu_mem_gb (0: memory not
 * checked) and mem_reserve (MP_MEM_RESERVE_DEFAULT); every other key is required. */
int mp_cluster_resolve(const char *spec, struct mp_cluster *out);

/* Check every field is present and in range; `what` names the source in the message. */
int mp_cluster_validate(const struct mp_cluster *c, const char *what);

/* Write `c` as a key=value profile that mp_cluster_resolve reads back (all keys, with comments). */
int mp_cluster_write(const struct mp_cluster *c, FILE *f);

/* Access a parameter by its table index. */
double *mp_cluster_param_ptr(struct mp_cluster *c, int i);

/* ---- the model's equations (docs/planning.md) ---- */

/* A kernel's smoothed roofline (docs/planning.md, "Expert FFN"): with C = flops / rate and
 * M = bytes / (hbm_bw·hbm_eff), max(C, M) + β·min(C, M), β = ffn_blend  [µs] */
double mp_cost_roofline_us(const struct mp_cluster *c, double flops, double rate, double bytes);

/* Expert FFN of one rank (docs/planning.md, "Expert FFN"): with C = flops / (F·e_F) and
 * M = bytes / (B·e_B), max(C, M) + β·min(C, M), plus launch·active for a GEMM loop (`gemm`
 * MP_GEMM_LOOP: a launch per expert) or the one fused call's ffn_call_us otherwise  [µs] */
double mp_cost_ffn_us(const struct mp_cluster *c, double flops, double weight_bytes, int active,
                       int gemm);

/* The expert FFN of one rank: `rows` rows (shared ones included) over `active` experts of shard
 * H×Dl with weights in `weight_dtype` (enum mp_dtype): FLOPs 6·H·Dl·rows at F·e_F = flops·flops_eff
 * for bf16 or flops_fp8·flops_fp8_eff for fp8, weight bytes active · mp_expert_weight_bytes
 * (core/workload/dtype.h: fp8 codes and block scales for fp8), into mp_cost_ffn_us with `gemm` (enum
 * mp_gemm)  [µs] */
double mp_cost_expert_ffn_us(const struct mp_cluster *c, int H, int Dl, double rows, int active,
                              int weight_dtype, int gemm);

/* mp_cost_expert_ffn_us's constants for one shard, dtype and GEMM form, worked out once for the
 * many ranks a timing prices (mp_cost_ffn_prepare), then each rank's FFN from its rows and active
 * experts (mp_cost_ffn_prepared_us): the same double mp_cost_expert_ffn_us gives, which is
 * computed this way. */
struct mp_ffn_cost {
    const struct mp_cluster *c;
    double flops_per_row; /* 6·H·Dl */
    double expert_bytes;  /* mp_expert_weight_bytes of one expert's shard */
    double rate;          /* F·e_F of the dtype and GEMM form */
    int gemm;
};
void mp_cost_ffn_prepare(const struct mp_cluster *c, int H, int Dl, int weight_dtype, int gemm,
                         struct mp_ffn_cost *f);
double mp_cost_ffn_prepared_us(const struct mp_ffn_cost *f, double rows, int active);

/* One exchange round of an all-to-all for one rank: latency of each link class it uses, plus the
 * largest volume any rank sends or receives on that class over the class bandwidth; the
 * inter-node part times 1 + γ·log2(incast) where incast is the most senders on other nodes any
 * receiving rank has. Volumes in bytes; the classes run concurrently, so the time is the larger. */
double mp_cost_exchange_us(const struct mp_cluster *c, double intra_max_bytes,
                            double inter_max_bytes, int uses_intra, int uses_inter, int incast);

/* Ring allreduce of `bytes` over `tp` ranks: 2(tp−1)/tp · bytes over the link bandwidth
 * (reduce-scatter then all-gather, Patarasuk & Yuan 2009) plus two rounds of latency (the steps of
 * each half are pipelined), on the intra-node link when the group fits in a node, else on the
 * inter-node one. 0 when tp = 1. */
double mp_cost_allreduce_us(const struct mp_cluster *c, double bytes, int tp);

/* mp_cost_allreduce_us's constants for one TP size, worked out once for the many ranks a timing
 * prices (mp_cost_allreduce_prepare), then each reduce of `bytes` (mp_cost_allreduce_prepared_us):
 * the same double mp_cost_allreduce_us gives, which is computed this way. */
struct mp_allreduce_cost {
    int tp;
    double lat2, share, bw; /* 2·lat, 2·(tp − 1)/tp and the bandwidth of the group's links */
};
void mp_cost_allreduce_prepare(const struct mp_cluster *c, int tp, struct mp_allreduce_cost *a);
double mp_cost_allreduce_prepared_us(const struct mp_allreduce_cost *a, double bytes);

/* A layer pipelined in `nchunks` chunks on two resources: the network, one FIFO shared by every
 * dispatch and combine exchange (each a collective over all ranks, `dispatch_us[k]`,
 * `combine_us[k]`), and each of `nranks` ranks' compute unit (chunk k's expert FFN and TP reduce
 * on rank p: `compute_us[k·nranks + p]`). Exchanges are issued in the measured pipeline's order
 * D0, D1, C0, D2, C1, …, D(N−1), C(N−2), C(N−1) and each starts when the network is free and it is
 * ready: a dispatch at once, combine k once every rank has finished compute k. Compute k on a rank
 * starts when dispatch k has ended and its compute k−1 is done. Returns the end of the last
 * combine, in µs from the first dispatch; `rank_end[p]` (nranks entries) receives when rank p's
 * compute unit finished its last chunk. With one chunk: D0 + max_p compute_p + C0. */
double mp_cost_pipeline_us(int nchunks, const double *dispatch_us, const double *combine_us,
                            const double *compute_us, int nranks, double *rank_end);

#endif
