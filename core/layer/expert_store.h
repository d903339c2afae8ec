/* expert_store.h - one expert's weight shard put on a compute backend in the point's
 * --weight-dtype: as elements (bf16) or as fp8 images of codes and 128×128 block scales. */
#ifndef MP_EXPERT_STORE_H
#define MP_EXPERT_STORE_H

#include "compute.h" /* struct mp_compute_ops, enum mp_dtype */

/* Allocate on `dev` and fill *wgu and *wd with the shard hgu (H×2Dl, [Wg | Wu]) and hd (Dl×H) as
 * mp_ffn_args.weight_dtype `dt` says: bf16, the values uploaded as elements; fp8, each matrix
 * quantized on the host into its image (base/fp8.h, mp_fp8_image_store: [Wg | Wu] as two H×Dl
 * parts, Wd as one) and uploaded as bytes. On failure (an error printed) the pointers allocated
 * so far are left in *wgu and *wd for the caller to free. MP_OK or MP_ERR_RUNTIME. */
int mp_expert_store(const struct mp_compute_ops *o, struct mp_compute *dev, enum mp_dtype dt,
                    int expert, int H, int Dl, const float *hgu, const float *hd, void **wgu,
                    void **wd);

#endif
