/* dtype.h - the element types a dispatched row travels in (--dispatch-dtype: bf16, fp8) and the
 * expert weights are stored in (--weight-dtype), their words, what one row costs on the wire and
 * what one expert's weights cost to read. */
#ifndef MP_DTYPE_H
#define MP_DTYPE_H

#include <stddef.h>

#include "compute.h" /* enum mp_dtype, MP_DTYPE_BIT */
#include "fp8.h"     /* MP_FP8_BLOCK */

/* Bytes per element of a large weight matrix stored block-scaled fp8, as DeepSeek-V3's and
 * Qwen3-FP8's checkpoints store their linear layers: a code and a 4-byte scale per 128×128 block
 * (base/fp8.h). */
#define MP_FP8_WEIGHT_BYTES (1 + 4.0 / ((double)MP_FP8_BLOCK * MP_FP8_BLOCK))

/* The --dispatch-dtype words in enum order, NULL-terminated. */
extern const char *const mp_dtype_choices[];

/* --dispatch-dtype's help text. */
#define MP_DISPATCH_DTYPE_HELP                                                                     \
    "element type of the dispatched rows: bf16 (the backend's activation type as it is: bf16 "    \
    "on GPUs, fp32 rows on the cpu backend) or fp8 (OCP e4m3 with one fp32 scale per 128 "        \
    "values, quantized after the gate, dequantized at the expert); the combine stays in the "     \
    "activation type; a list sweeps them"

/* --weight-dtype's help text. */
#define MP_WEIGHT_DTYPE_HELP                                                                       \
    "element type of the routed and shared experts' weights: bf16 (the backend's weight type as "  \
    "it is: bf16 on GPUs, fp32 on the cpu backend) or fp8 (OCP e4m3 with one fp32 scale per "     \
    "128x128 block; the cpu backend dequantizes them block row by block row into fp32 for its "   \
    "GEMMs, a reference path, not a fast one); the router's weights stay as they are; a list "    \
    "sweeps them"

/* Read one word of `flag` (e.g. "--dispatch-dtype") into *dt: MP_OK, or MP_ERR_USAGE after a
 * message naming the flag, the word and the accepted words. */
int mp_dtype_parse(const char *flag, const char *word, enum mp_dtype *dt);

/* Bytes one dispatched row of H activations puts on the wire: `act_row_bytes` (H times the
 * activation element size) for bf16, H + 4·⌈H/128⌉ (codes and scales, base/fp8.h) for fp8. */
double mp_dispatch_row_bytes(enum mp_dtype dt, int H, double act_row_bytes);

/* Bytes of one expert's weight shard (W_gate, W_up: H×Dl; W_down: Dl×H) in `dt`, as its GEMMs
 * read them: 3·H·Dl·elem for bf16 (elem the backend's or profile's bytes per element); for fp8
 * 3·H·Dl code bytes plus 4 for each of the 3·⌈H/128⌉·⌈Dl/128⌉ blocks' scales (base/fp8.h:
 * mp_fp8_weight_bytes of each matrix). */
double mp_expert_weight_bytes(enum mp_dtype dt, int H, int Dl, double elem);

/* What a dtype flag is about: the dispatched rows (the backend table's dispatch_dtypes) or the
 * expert weights (weight_dtypes). */
enum mp_dtype_use { MP_DTYPE_USE_DISPATCH, MP_DTYPE_USE_WEIGHTS };

/* Every word of `flag`'s list (`n` words) a type the compute backend `ops` takes for `use`: MP_OK,
 * or MP_ERR_USAGE after a message naming the flag, the word and what is accepted (the types, or
 * the built backends that take it). */
int mp_dtype_refuse_unsupported(const char *flag, char *const *words, int n,
                                const struct mp_compute_ops *ops, enum mp_dtype_use use);

#endif
