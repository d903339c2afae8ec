/* cublas_entry.h - the cuBLAS entry points the cuda backend calls, resolved when the backend starts
 * (dlopen of the toolkit's libcublas.so.MAJOR) instead of when the program loads: a process that
 * never starts the cuda backend (the cpu and model backends, the report tools' runs) then does not
 * map cuBLAS and cuBLASLt, about 0.1 s of start-up on its own and 13 s under valgrind. The CPU
 * stand-in (MP_CUBLAS_LINKED) links its cuBLAS in and fills the table directly. */
#ifndef MP_CUBLAS_ENTRY_H
#define MP_CUBLAS_ENTRY_H

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

/* The library names tried in order: the soname of the cuBLAS the backend was compiled against
 * (found through the loader's search path: LD_LIBRARY_PATH, the program's run path, ld.so.cache),
 * then the same file in the toolkit's library directory at configure time (MP_CUDA_LIBDIR). */
#define MP_CUBLAS_SONAME "libcublas.so." MP_CUBLAS_STR(CUBLAS_VER_MAJOR)

/* Fill *e once: 0, or −1 with why[len] naming the library or entry point that could not be found
 * (the loader's own message included). Not thread-safe: called when a backend starts. */
static inline int mp_cublas_load(struct mp_cublas_entry *e, char *why, size_t len)
{
    if (e->loaded)
        return 0;
#if MP_CUBLAS_LINKED
    (void)why;
    (void)len;
#define MP_CUBLAS_TAKE(field, fn, type) e->field = &fn;
    MP_CUBLAS_ENTRIES(MP_CUBLAS_TAKE)
#undef MP_CUBLAS_TAKE
#else
    const char *names[] = {MP_CUBLAS_SONAME,
#ifdef MP_CUDA_LIBDIR
                           MP_CUDA_LIBDIR "/" MP_CUBLAS_SONAME,
#endif
    };
    void *lib = NULL;
    const char *err = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !lib; i++)
        if (!(lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            err = dlerror();
    if (!lib) {
        snprintf(why, len, "cannot load cuBLAS (%s): %s", MP_CUBLAS_SONAME, err);
        return -1;
    }
    /* kept open for the life of the process: cuBLAS does not support being unloaded */
#define MP_CUBLAS_RESOLVE(field, fn, type)                                                         \
    if (!(*(void **)&e->field = dlsym(lib, MP_CUBLAS_STR(fn)))) {                                  \
        snprintf(why, len, "%s has no %s: %s", MP_CUBLAS_SONAME, MP_CUBLAS_STR(fn), dlerror());    \
        return -1;                                                                                 \
    }
    MP_CUBLAS_ENTRIES(MP_CUBLAS_RESOLVE)
#undef MP_CUBLAS_RESOLVE
#endif
    e->loaded = 1;
    return 0;
}

#endif
