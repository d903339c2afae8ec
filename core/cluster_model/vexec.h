/* vexec.h - the model's traced ranks: every virtual rank of a layout runs the layer's own stages
 * (its dispatch mode's iterate, through mp_layer_run_draws) on the model compute and comm of
 * traced ranks, and the traffic of each routing draw is read off what they did: the rank records,
 * the exchanges they made and the expert FFNs they ran (docs/ARCHITECTURE.md, "The model"). */
#ifndef MP_VEXEC_H
#define MP_VEXEC_H

#include <stddef.h>
#include <stdint.h>

#include "vtraffic.h"

/* As mp_vtraffic_build: the traffic of each of the point's routing draws on a tp × ep layout
 * (ranks packed the profile's gpus_per_node to a node; row bytes the profile's), *ndraws entries
 * in *out, free with mp_vtraffic_free; but made by running the stages on tp·ep traced ranks, one
 * fiber each, instead of by the dispatch mode's model_traffic. The rows are computed by nobody,
 * so the ranks hold small ones (--hidden and --ffn do not change a count). Gate routing, which
 * has no activations to route on the model, is replayed with the model's draws of it (uniform,
 * group-limited alike); with --expert-cache the ranks run without one and each local expert's
 * rows are read off their FFNs (t->used, used_rows), for the model's cache timeline. MP_OK, or
 * MP_ERR_RUNTIME on a failure. */
/* The model `m` as traced ranks of TP size tp run it (into *small): rows of a small hidden size
 * (TRACED_HIDDEN or just above, so that no row of activations, bf16 or packed fp8, has the bytes
 * of a metadata row) and a small FFN shard; the rest as m. Returns a metadata row's bytes (K
 * entries of struct mp_dedup_meta), which no count depends on either. */
size_t mp_vexec_small_model(const struct mp_model *m, int tp, struct mp_model *small);

int mp_vexec_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                   uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                   int *ndraws);

#endif
