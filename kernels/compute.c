/* compute.c - the registry of compute backends (the ones built into this binary, from meson.build's
 * list), lookup by name and the start-up check of a backend's table. */
#include "compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "error.h"
#include "registry.h"

#define OPS_OF(n) &mp_compute_##n,
const struct mp_compute_ops *const mp_compute_backends[] = {
    MP_COMPUTE_BACKENDS(OPS_OF, MP_REGISTRY_SKIP_ABSENT) NULL};
#undef OPS_OF
const char *const mp_compute_choices[] = MP_REGISTRY_CHOICES(MP_COMPUTE_BACKENDS);
static const struct mp_backend_absent absent[] = MP_REGISTRY_ABSENT(MP_COMPUTE_BACKENDS);

static const char *name_at(int i) { return mp_compute_backends[i]->name; }

#define REQUIRE MP_REGISTRY_REQUIRE

int mp_compute_check(const struct mp_compute_ops *o, char *why, size_t len)
{
    REQUIRE(o->name && o->name[0], "has no name");
    REQUIRE(o->memory == MP_MEMORY_HOST || o->memory == MP_MEMORY_DEVICE ||
                o->memory == MP_MEMORY_VIRTUAL, "has an unknown memory kind %d", (int)o->memory);
    REQUIRE(o->init && o->fini && o->device_name && o->sync,
            "lacks one of init, fini, device_name, sync (required of every backend)");
    REQUIRE(o->elem_size > 0, "has no element size");
    REQUIRE(o->dispatch_modes && !(o->dispatch_modes & ~MP_DISPATCH_ALL),
            "has dispatch modes 0x%x (some of dynamic, padded, pipelined needed)",
            o->dispatch_modes);
    REQUIRE((o->dispatch_dtypes & MP_DTYPE_BIT(MP_DTYPE_BF16)) &&
                !(o->dispatch_dtypes & ~(MP_DTYPE_BIT(MP_DTYPE_COUNT) - 1)),
            "has dispatch dtypes 0x%x (bf16 needed, nothing beyond fp8)", o->dispatch_dtypes);
    REQUIRE((o->weight_dtypes & MP_DTYPE_BIT(MP_DTYPE_BF16)) &&
                !(o->weight_dtypes & ~(MP_DTYPE_BIT(MP_DTYPE_COUNT) - 1)),
            "has weight dtypes 0x%x (bf16 needed, nothing beyond fp8)", o->weight_dtypes);
    REQUIRE(!!(o->dispatch_dtypes & MP_DTYPE_BIT(MP_DTYPE_FP8)) ==
                    (o->fp8_pack && o->fp8_unpack) && !o->fp8_pack == !o->fp8_unpack,
            "%s fp8 dispatch but fills %s of fp8_pack and fp8_unpack",
            o->dispatch_dtypes & MP_DTYPE_BIT(MP_DTYPE_FP8) ? "claims" : "does not claim",
            o->fp8_pack || o->fp8_unpack ? "some" : "neither");
    REQUIRE(!(o->gemm_modes & ~((1u << MP_GEMM_COUNT) - 1) & ~(1u << MP_GEMM_LOOP)),
            "has gemm modes 0x%x beyond grouped, skinny and fused", o->gemm_modes);
    REQUIRE(!(o->shared_gemm_modes & ~(o->gemm_modes | 1u << MP_GEMM_LOOP)) &&
                (!o->shared_gemm_modes || o->expert_ffn),
            "runs shared experts in the call for gemm modes 0x%x, beyond its modes 0x%x or "
            "without expert_ffn", o->shared_gemm_modes, o->gemm_modes);
    REQUIRE(!o->fp8_gemm_modes == !(o->weight_dtypes & MP_DTYPE_BIT(MP_DTYPE_FP8)) &&
                !(o->fp8_gemm_modes & ~(o->gemm_modes | 1u << MP_GEMM_LOOP)),
            "has fp8 gemm modes 0x%x with weight dtypes 0x%x and gemm modes 0x%x (some exactly "
            "with fp8 weights, none beyond loop and its gemm modes)", o->fp8_gemm_modes,
            o->weight_dtypes, o->gemm_modes);
    /* the data hooks: all of them on every backend (a virtual one's hold and move nothing) */
    int data = !!o->alloc + !!o->free + !!o->upload + !!o->download + !!o->upload_bytes +
               !!o->download_bytes + !!o->gate + !!o->permute + !!o->copy_rows +
               !!o->expert_ffn + !!o->combine + !!o->plan_setup + !!o->plan_build + !!o->mark +
               !!o->elapsed_us + !!o->measure_peak + !!o->cache_setup + !!o->cache_fetch +
               !!o->cache_release + !!o->cache_exposed_us;
    REQUIRE(data == 20, "lacks one of alloc, free, upload, download, upload_bytes, "
                        "download_bytes, gate, permute, copy_rows, expert_ffn, combine, "
                        "plan_setup, plan_build, mark, elapsed_us, measure_peak, cache_setup, "
                        "cache_fetch, cache_release, cache_exposed_us");
    REQUIRE(o->check_tolerance > 0, "has no --check tolerance");
    REQUIRE(o->memory != MP_MEMORY_VIRTUAL || (!o->flush_cache && !o->preselect),
            "is virtual but flushes a cache or preselects a device");
    /* device memory: the stream a device comm backend orders its collectives with */
    REQUIRE((o->memory == MP_MEMORY_DEVICE) == !!o->native_stream,
            "has %s memory but %s native_stream",
            o->memory == MP_MEMORY_DEVICE ? "device" : "no device",
            o->native_stream ? "fills" : "lacks");
    REQUIRE(o->memory == MP_MEMORY_DEVICE || (!o->preselect && !o->mem_info && !o->pci_bus_id),
            "has no device but fills preselect, mem_info or pci_bus_id");
    int capture = !!o->capture_begin + !!o->capture_end + !!o->replay + !!o->graph_reset +
                  !!o->host_alloc + !!o->host_free;
    REQUIRE(o->graph ? capture == 6 : capture == 0,
            "%s graph capture but fills %d of capture_begin, capture_end, replay, graph_reset, "
            "host_alloc, host_free", o->graph ? "claims" : "does not claim", capture);
    REQUIRE(!o->graph || o->memory == MP_MEMORY_DEVICE, "claims graph capture without a device");
    return 1;
}

static int check_at(int i, char *why, size_t len)
{
    return mp_compute_check(mp_compute_backends[i], why, len);
}

int mp_compute_find(const char *name, const struct mp_compute_ops **out)
{
    int n = 0, i;
    while (mp_compute_backends[n])
        n++;
    int rc = mp_registry_lookup("--backend", "compute", name, n, name_at, absent, check_at, &i);
    *out = rc == MP_OK ? mp_compute_backends[i] : NULL;
    return rc;
}

int mp_compute_expert_ffn(const struct mp_compute_ops *ops, struct mp_compute *dev,
                          const struct mp_ffn_args *a)
{
    if (a->nshared > 0 && (ops->shared_gemm_modes & 1u << a->gemm))
        return ops->expert_ffn(dev, a);
    struct mp_ffn_args routed = *a;
    routed.nshared = 0;
    int rc = a->nexp > 0 ? ops->expert_ffn(dev, &routed) : MP_OK;
    const long off[2] = {0, a->shared_rows};
    for (int s = 0; rc == MP_OK && s < a->nshared && a->shared_rows > 0; s++) {
        struct mp_ffn_args one = routed;
        one.in = a->shared_in;
        one.out = (char *)a->shared_out + (size_t)s * (size_t)a->shared_rows * (size_t)a->H *
                                              ops->elem_size;
        one.row_off = off;
        one.nexp = 1;
        one.wgu = a->wgu + a->nexp + s;
        one.wd = a->wd + a->nexp + s;
        rc = ops->expert_ffn(dev, &one);
    }
    return rc;
}

int mp_compute_delay(const struct mp_compute_ops *ops, struct mp_compute *dev, double us)
{
    if (us <= 0)
        return MP_OK;
    if (ops->delay)
        return ops->delay(dev, us);
    double until = mp_now_us() + us;
    while (mp_now_us() < until)
        ;
    return MP_OK;
}

const char *mp_compute_names_where(int (*has)(const struct mp_compute_ops *ops), char *buf,
                                   size_t len)
{
    buf[0] = '\0';
    for (int i = 0; mp_compute_backends[i]; i++)
        if (has(mp_compute_backends[i]))
            mp_registry_append(buf, len, mp_compute_backends[i]->name);
    if (!buf[0])
        snprintf(buf, len, "none");
    return buf;
}

int mp_compute_quick(void)
{
    const char *v = getenv("MOEPERF_TEST_QUICK");
    return v && !strcmp(v, "1");
}
