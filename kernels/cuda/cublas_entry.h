/* cublas_entry.h - the cuBLAS and cuBLASLt entry points the cuda backend calls, resolved when the
 * backend starts (dlopen of the toolkit's libcublas.so.MAJOR and libcublasLt.so.MAJOR) instead of
 * when the program loads: a process that never starts the cuda backend (the cpu and model backends,
 * the report tools' runs) then does not map cuBLAS and cuBLASLt, about 0.1 s of start-up on its own
 * and 13 s under valgrind. The CPU stand-in (MP_CUBLAS_LINKED) links its cuBLAS and cuBLASLt in and
 * fills the tables directly. */
#ifndef MP_CUBLAS_ENTRY_H
#define MP_CUBLAS_ENTRY_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdio.h>
#if !MP_CUBLAS_LINKED
#include <dlfcn.h>
#endif

/* a name after macro expansion: MP_CUBLAS_STR(cublasCreate) is "cublasCreate_v2" */
#define MP_CUBLAS_STR2(x) #x
#define MP_CUBLAS_STR(x) MP_CUBLAS_STR2(x)

/* cublasGemmEx as the backend calls it (compute type cublasComputeType_t); C++ also sees an inline
 * overload taking a cudaDataType compute type, so its pointer type is written out. */
typedef cublasStatus_t (*mp_cublas_gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                               int, int, int, const void *, const void *,
                                               cudaDataType, int, const void *, cudaDataType, int,
                                               const void *, void *, cudaDataType, int,
                                               cublasComputeType_t, cublasGemmAlgo_t);

/* Every cuBLAS function the backend calls: its field, its name in the header, its pointer type. */
#define MP_CUBLAS_ENTRIES(X)                                                                       \
    X(create, cublasCreate, decltype(&cublasCreate))                                               \
    X(destroy, cublasDestroy, decltype(&cublasDestroy))                                            \
    X(set_stream, cublasSetStream, decltype(&cublasSetStream))                                     \
    X(set_workspace, cublasSetWorkspace, decltype(&cublasSetWorkspace))                            \
    X(gemm_ex, cublasGemmEx, mp_cublas_gemm_ex_fn)                                                 \
    X(gemm_grouped_batched_ex, cublasGemmGroupedBatchedEx, decltype(&cublasGemmGroupedBatchedEx))

struct mp_cublas_entry {
#define MP_CUBLAS_FIELD(field, fn, type) type field;
    MP_CUBLAS_ENTRIES(MP_CUBLAS_FIELD)
#undef MP_CUBLAS_FIELD
    int loaded;
};

/* Every cuBLASLt function the backend calls (the block-scaled FP8 GEMMs), as MP_CUBLAS_ENTRIES. */
#define MP_CUBLASLT_ENTRIES(X)                                                                     \
    X(create, cublasLtCreate, decltype(&cublasLtCreate))                                           \
    X(destroy, cublasLtDestroy, decltype(&cublasLtDestroy))                                        \
    X(desc_create, cublasLtMatmulDescCreate, decltype(&cublasLtMatmulDescCreate))                  \
    X(desc_destroy, cublasLtMatmulDescDestroy, decltype(&cublasLtMatmulDescDestroy))               \
    X(desc_set, cublasLtMatmulDescSetAttribute, decltype(&cublasLtMatmulDescSetAttribute))         \
    X(layout_create, cublasLtMatrixLayoutCreate, decltype(&cublasLtMatrixLayoutCreate))            \
    X(layout_destroy, cublasLtMatrixLayoutDestroy, decltype(&cublasLtMatrixLayoutDestroy))         \
    X(pref_create, cublasLtMatmulPreferenceCreate, decltype(&cublasLtMatmulPreferenceCreate))      \
    X(pref_destroy, cublasLtMatmulPreferenceDestroy, decltype(&cublasLtMatmulPreferenceDestroy))   \
    X(pref_set, cublasLtMatmulPreferenceSetAttribute,                                              \
      decltype(&cublasLtMatmulPreferenceSetAttribute))                                             \
    X(heuristic, cublasLtMatmulAlgoGetHeuristic, decltype(&cublasLtMatmulAlgoGetHeuristic))        \
    X(matmul, cublasLtMatmul, decltype(&cublasLtMatmul))

struct mp_cublaslt_entry {
#define MP_CUBLAS_FIELD(field, fn, type) type field;
    MP_CUBLASLT_ENTRIES(MP_CUBLAS_FIELD)
#undef MP_CUBLAS_FIELD
    int loaded;
};

/* The library names tried in order: the soname of the library the backend was compiled against
 * (found through the loader's search path: LD_LIBRARY_PATH, the program's run path, ld.so.cache),
 * then the same file in the toolkit's library directory at configure time (MP_CUDA_LIBDIR). */
#define MP_CUBLAS_SONAME "libcublas.so." MP_CUBLAS_STR(CUBLAS_VER_MAJOR)
#define MP_CUBLASLT_SONAME "libcublasLt.so." MP_CUBLAS_STR(CUBLAS_VER_MAJOR)

/* the linked stand-in: each field takes the symbol of its name */
#define MP_CUBLAS_TAKE(field, fn, type) e->field = &fn;

#if !MP_CUBLAS_LINKED
/* The library `soname` (what: its name in messages), opened once for the life of the process (cuBLAS
 * and cuBLASLt do not support being unloaded): its handle, or NULL with why[len] saying why. */
static inline void *mp_cublas_open(const char *soname, const char *what, char *why, size_t len)
{
#ifdef MP_CUDA_LIBDIR
    char in_libdir[512];
    snprintf(in_libdir, sizeof in_libdir, "%s/%s", MP_CUDA_LIBDIR, soname);
    const char *names[] = {soname, in_libdir};
#else
    const char *names[] = {soname};
#endif
    void *lib = NULL;
    const char *err = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !lib; i++)
        if (!(lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            err = dlerror();
    if (!lib)
        snprintf(why, len, "cannot load %s (%s): %s", what, soname, err);
    return lib;
}

/* *slot = the address of `name` in lib (opened as soname): 0, or −1 with why[len] saying why. */
static inline int mp_cublas_symbol(void *lib, const char *soname, const char *name, void **slot,
                                   char *why, size_t len)
{
    if ((*slot = dlsym(lib, name)))
        return 0;
    snprintf(why, len, "%s has no %s: %s", soname, name, dlerror());
    return -1;
}

/* one field of *e resolved from lib (opened as soname), or return −1 from the loader */
#define MP_CUBLAS_RESOLVE(field, fn, type)                                                         \
    if (mp_cublas_symbol(lib, soname, MP_CUBLAS_STR(fn), (void **)&e->field, why, len))            \
        return -1;
#endif

/* Define `static inline int NAME(struct TYPE *e, char *why, size_t len)`: fill *e once with the
 * entry points ENTRIES names, linked or from SONAME (LABEL in messages); 0, or −1 with why[len]
 * naming the library or entry point that could not be found (the loader's own message included).
 * Not thread-safe: called when a backend starts. */
#if MP_CUBLAS_LINKED
#define MP_CUBLAS_LOADER(NAME, TYPE, ENTRIES, SONAME, LABEL)                                       \
    static inline int NAME(struct TYPE *e, char *why, size_t len)                                  \
    {                                                                                              \
        (void)why;                                                                                 \
        (void)len;                                                                                 \
        if (!e->loaded) {                                                                          \
            ENTRIES(MP_CUBLAS_TAKE)                                                                \
            e->loaded = 1;                                                                         \
        }                                                                                          \
        return 0;                                                                                  \
    }
#else
#define MP_CUBLAS_LOADER(NAME, TYPE, ENTRIES, SONAME, LABEL)                                       \
    static inline int NAME(struct TYPE *e, char *why, size_t len)                                  \
    {                                                                                              \
        if (e->loaded)                                                                             \
            return 0;                                                                              \
        const char *soname = SONAME;                                                               \
        void *lib = mp_cublas_open(soname, LABEL, why, len);                                       \
        if (!lib)                                                                                  \
            return -1;                                                                             \
        ENTRIES(MP_CUBLAS_RESOLVE)                                                                 \
        e->loaded = 1;                                                                             \
        return 0;                                                                                  \
    }
#endif

/* mp_cublas_load: cuBLAS (libcublas.so.MAJOR); mp_cublaslt_load: cuBLASLt (libcublasLt.so.MAJOR,
 * the same search) */
MP_CUBLAS_LOADER(mp_cublas_load, mp_cublas_entry, MP_CUBLAS_ENTRIES, MP_CUBLAS_SONAME, "cuBLAS")
MP_CUBLAS_LOADER(mp_cublaslt_load, mp_cublaslt_entry, MP_CUBLASLT_ENTRIES, MP_CUBLASLT_SONAME,
                 "cuBLASLt")

#endif
