/* vlayer.h - the layer pipeline for virtual ranks: the same routing, placement, dispatch plan and
 * metrics as a measurement, with every phase's duration taken from the cluster model instead of
 * hardware, so one process plays a whole cluster. */
#ifndef MP_VLAYER_H
#define MP_VLAYER_H

#include <stdint.h>

#include "cluster.h"
#include "layer.h"

/* Run one point for the tp × ep virtual ranks of a layout (ranks packed gpus_per_node to a node,
 * rank r = ep_rank·tp + tp_rank) on cluster `cl`. Fills `res` as mp_layer_run does on rank 0:
 * per-iteration records of every rank, per-iteration metrics, tokens_per_rank; check_error NAN.
 * Iterations differ by routing draw (a pool of up to 8 draws, as measured runs use); gate routing
 * is modelled with uniform draws (there are no activations). Returns MP_OK or MP_ERR_RUNTIME. */
int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res);

#endif
