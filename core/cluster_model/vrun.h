/* vrun.h - a modelled point through the layer's own pipeline: every virtual rank runs
 * mp_layer_run on a clock the cluster model moves (docs/ARCHITECTURE.md, "The model"). */
#ifndef MP_VRUN_H
#define MP_VRUN_H

#include <stdint.h>

#include "cluster.h"
#include "layer.h"

/* Point pt on a tp × ep layout of the cluster profile `cl`, modelled: tp·ep traced ranks (one
 * fiber each, small rows: vexec.h) run mp_layer_run, its warm-up, timed iterations and
 * unpipelined reference as a measurement runs them, while each rank's virtual clock moves by what
 * the profile says its work takes: a routing kernel's launch (and the gate GEMM), each FFN phase
 * on the roofline of its rows and experts, each exchange from where its members meet, counted
 * from the last to arrive (one network per group for started ones), each TP allreduce. Waiting,
 * stragglers and overlap come out of the run. res as mp_layer_run fills it on rank 0. MP_OK,
 * MP_ERR_USAGE (a point the measured layer refuses or the model cannot time, after a message) or
 * MP_ERR_RUNTIME. */
int mp_vrun_point(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res);

struct mp_comm;
struct mp_compute;
/* A benchmark's own per-rank code on the model (moeperf-a2a's and moeperf-ffn's --backend
 * model): run fn(its comm, its compute, arg) for every virtual rank of a world of `world`
 * ranks (the profile's gpus_per_node to a node), each on a fiber, its compute a
 * mp_compute_model (no data) on the rank's virtual clock. The exchanges check their counts and
 * move no bytes: one of rows costs the round its rows make at the bytes per row it names
 * (mp_vexchange_of, mp_vexchange_us), with no launch (what an exchange benchmark times); a count
 * exchange one latency round; collectives start at their last member's arrival and started
 * exchanges queue on their group's network, as mp_vrun_point's. An FFN phase costs
 * mp_cost_expert_ffn_us of its calls' rows and experts with rows, at the shape, weight dtype and
 * GEMM they name. The first failing rank's status. */
int mp_vrun_world(const struct mp_cluster *cl, const struct mp_model *m, int world,
                  int (*fn)(struct mp_comm *c, struct mp_compute *dev, void *arg), void *arg);

#endif
