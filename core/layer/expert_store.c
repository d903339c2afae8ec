/* expert_store.c - an expert's weight shard stored on a backend in bf16 or fp8 (expert_store.h). */
#include "expert_store.h"

#include <stdlib.h>

#include "error.h"
#include "fp8.h"

/* Backend elements that hold `bytes` bytes. */
static size_t elems_for(const struct mp_compute_ops *o, size_t bytes)
{
    return (bytes + o->elem_size - 1) / o->elem_size;
}

/* Quantize the K×(parts·N) matrix w into its fp8 image and upload it into a new buffer *dst. */
static int store_image(const struct mp_compute_ops *o, struct mp_compute *dev, const float *w,
                       int K, int N, int parts, void **dst)
{
    size_t bytes = mp_fp8_image_bytes(K, N, parts);
    unsigned char *img = malloc(bytes);
    *dst = o->alloc(dev, elems_for(o, bytes));
    int rc = MP_ERR_RUNTIME;
    if (img && *dst) {
        mp_fp8_image_store(w, K, N, parts, img);
        rc = o->upload_bytes(dev, *dst, img, bytes);
    }
    free(img);
    return rc;
}

int mp_expert_store(const struct mp_compute_ops *o, struct mp_compute *dev, enum mp_dtype dt,
                    int expert, int H, int Dl, const float *hgu, const float *hd, void **wgu,
                    void **wd)
{
    size_t h = (size_t)H, dl = (size_t)Dl;
    int rc;
    if (dt == MP_DTYPE_FP8) {
        rc = store_image(o, dev, hgu, H, Dl, 2, wgu);
        if (rc == MP_OK)
            rc = store_image(o, dev, hd, Dl, H, 1, wd);
    } else {
        *wgu = o->alloc(dev, h * 2 * dl);
        *wd = o->alloc(dev, dl * h);
        rc = *wgu && *wd ? o->upload(dev, *wgu, hgu, h * 2 * dl) : MP_ERR_RUNTIME;
        if (rc == MP_OK)
            rc = o->upload(dev, *wd, hd, dl * h);
    }
    if (rc != MP_OK)
        mp_error("out of memory for the %s weights of expert %d", dt == MP_DTYPE_FP8 ? "fp8" : "bf16",
                 expert);
    return rc;
}
