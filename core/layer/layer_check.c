/* layer_check.c - --check: the layer's output of routing draw 0, gathered on rank 0 and compared
 * with the single-process double-precision reference forward. */
#include <math.h>
#include <stdlib.h>

#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "reference.h"
#include "routing.h"
#include "topo.h"
#include "weights.h"

int mp_layer_check_output(struct mp_layer *L, const struct mp_point *pt,
                          struct mp_routing_pool *pool, long batch_tokens, long ntok, double *err,
                          double *err_unq)
{
    int fp8 = pt->dispatch_dtype == MP_DTYPE_FP8;
    int wtp = pt->weight_dtype == MP_DTYPE_FP8 ? L->tp : 0; /* fp8 weights: the layer's shards */
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, K = L->m.topk, E = L->m.experts;
    int rc = MP_ERR_RUNTIME;
    size_t mine = c->tp_rank == 0 ? (size_t)ntok * H * sizeof(float) : 0;
    float *y = malloc(mine ? mine : 1), *yall = NULL, *ref = NULL, *xall = NULL, *wall = NULL,
          *noise = NULL, *xq = NULL;
    double errs[2] = {NAN, NAN}; /* against the reference as dispatched, and unquantized */
    int32_t *ids = NULL;
    size_t *bytes_of = NULL, all_bytes = 0;
    if (!y)
        goto oom;
    if (mine)
        MP_CHECK(L->ops->download(L->dev, y, L->y, (size_t)ntok * H));
    if (c->rank == 0) {
        size_t all = (size_t)batch_tokens * H;
        all_bytes = all * sizeof(float);
        yall = malloc(all * sizeof(float));
        ref = malloc(all * sizeof(float));
        xall = malloc(all * sizeof(float));
        ids = malloc((size_t)batch_tokens * K * sizeof(int32_t));
        wall = malloc((size_t)batch_tokens * K * sizeof(float));
        bytes_of = malloc((size_t)c->size * sizeof(size_t));
        if (!yall || !ref || !xall || !ids || !wall || !bytes_of)
            goto oom;
        for (int r = 0; r < c->size; r++) {
            long t0;
            long n = mp_token_split(batch_tokens, L->ep, r / L->tp, &t0);
            bytes_of[r] = r % L->tp == 0 ? (size_t)n * H * sizeof(float) : 0;
        }
    }
    MP_CHECK(c->ops->gatherv(c, y, mine, yall, bytes_of));
    if (c->rank == 0) {
        if (pt->blocked_activations) /* the activations the point ran on (core/layer/layer.c) */
            mp_activations_blocked(L->seed, 0, batch_tokens, H, xall);
        else
            mp_activations(L->seed, 0, batch_tokens, H, xall);
        if (pool->noise) {
            noise = malloc((size_t)batch_tokens * E * sizeof(float));
            if (!noise)
                goto oom;
            mp_routing_gate_noise(pt->routing, L->seed, 0, 0, batch_tokens, noise);
            mp_reference_gate(xall, L->wg_host, noise, batch_tokens, H, E, K,
                              pt->routing->groups, pt->routing->group_pick, ids, wall);
        } else {
            mp_routing_draw(pt->routing, L->seed, 0, batch_tokens, 0, batch_tokens, ids, wall);
        }
        /* what the mode did to the routing (padded: pairs over capacity dropped), so does the
         * reference */
        const struct mp_dispatch_mode *mode = mp_dispatch_for(pt);
        if (mode->check_routing && mode->check_routing(L, pt, batch_tokens, K, ids, wall) != MP_OK)
            goto oom;
        /* fp8: the routed experts' inputs as the dispatch delivers them (the gate above read
         * the unquantized ones, as the layer's did), for the tight bound: on a bf16 backend
         * (elem_size 2) the tokens' bf16 values packed and the unpacked values rounded to bf16,
         * as the device does; then the unquantized reference for the loose one */
        if (fp8) {
            xq = malloc(all_bytes);
            if (!xq)
                goto oom;
            MP_CHECK(mp_reference_fp8_inputs(xall, batch_tokens, H, L->ops->elem_size == 2, xq));
        }
        /* fp8 weights: the tight reference computes with the weights as the layer stores them
         * (quantized per TP shard and dequantized), the loose one with the generated ones */
        int blk = L->blocked_weights;
        int bf16 = L->ops->elem_size == 2;
        MP_CHECK(mp_reference_forward(L->seed, H, L->m.ffn, E, L->S, blk, wtp, bf16, xall, xq,
                                      batch_tokens, K, ids, wall, ref));
        errs[0] = mp_rel_error(yall, ref, (long)batch_tokens * H);
        if (fp8 || wtp) {
            MP_CHECK(mp_reference_forward(L->seed, H, L->m.ffn, E, L->S, blk, 0, 0, xall, NULL,
                                          batch_tokens, K, ids, wall, ref));
            errs[1] = mp_rel_error(yall, ref, (long)batch_tokens * H);
        }
    }
    MP_CHECK(c->ops->bcast(c, errs, sizeof errs));
    *err = errs[0];
    *err_unq = errs[1];
    rc = MP_OK;
    goto out;
oom:
    mp_error("out of memory for --check with %ld tokens", batch_tokens);
    rc = MP_ERR_RUNTIME;
out:
    free(y);
    free(yall);
    free(ref);
    free(xall);
    free(ids);
    free(wall);
    free(noise);
    free(xq);
    free(bytes_of);
    return rc;
}
