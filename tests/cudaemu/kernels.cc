/* kernels.cc - kernels on the CPU stand-in: launches checked against the device's limits and
 * queued on their stream, blocks run one after another on the calling thread, the threads of a
 * kernel that calls __syncthreads as fibers that meet at each barrier, the others one after another. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <vector>

#include "fiber.h"
#include "internal.h"

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace cudaemu {

static bool in_coop;              /* a kernel whose threads run as fibers is running */
static const char *running_kernel = "";
static void *shared_dynamic;

void *dynamic_shared(void) { return shared_dynamic; }

struct fiber {
    mp_fiber_context ctx;
    char *stack;
    bool done;
};
/* a thread's stack: kernels' threads are shallow, and ASan clears the shadow of the whole stack at
 * every switch, so a small stack keeps the stand-in fast; a guard page below each one turns an
 * overflow into a fault instead of a silent write into the next stack */
static const size_t fiber_stack = (size_t)64 << 10;
static const size_t fiber_guard = 4096;
static std::vector<fiber> fibers;
static mp_fiber_context scheduler;
static int current_fiber;
static const std::function<void()> *fiber_body;
#if MP_FIBER_ASAN
static const void *scheduler_bottom;
static size_t scheduler_size;
#endif

static void fiber_main()
{
#if MP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_bottom, &scheduler_size);
#endif
    (*fiber_body)();
    fibers[(size_t)current_fiber].done = true;
#if MP_FIBER_ASAN
    __sanitizer_start_switch_fiber(nullptr, scheduler_bottom, scheduler_size);
#endif
    mp_fiber_context ended;
    mp_fiber_switch(&ended, &scheduler); /* never resumed: the block makes its fibers afresh */
}

static void block_index(unsigned t, const dim3 &b, uint3 *idx)
{
    idx->x = t % b.x;
    idx->y = (t / b.x) % b.y;
    idx->z = t / (b.x * b.y);
}

/* One block whose threads synchronise: each thread a fiber; a round runs every live thread up to
 * its next __syncthreads (or its end). Threads that ended while others wait at a barrier are a
 * divergent __syncthreads, which a device may hang on: reported as a fault. */
static void run_block_fibers(unsigned nthreads, const std::function<void()> &body)
{
    if (fibers.size() < nthreads) {
        size_t old = fibers.size();
        fibers.resize(nthreads);
        for (size_t t = old; t < nthreads; t++) {
            char *base = (char *)mmap(nullptr, fiber_guard + fiber_stack, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (base == MAP_FAILED || mprotect(base, fiber_guard, PROT_NONE) != 0)
                fault("no memory for the stacks of a %u-thread block", nthreads);
            fibers[t].stack = base + fiber_guard;
        }
    }
    fiber_body = &body;
    for (unsigned t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        mp_fiber_make(&f.ctx, f.stack, fiber_stack, fiber_main);
        f.done = false;
    }
    in_coop = true;
    for (unsigned live = nthreads; live > 0;) {
        unsigned waiting = 0;
        for (unsigned t = 0; t < nthreads; t++) {
            if (fibers[t].done)
                continue;
            current_fiber = (int)t;
            block_index(t, blockDim, &threadIdx);
#if MP_FIBER_ASAN
            void *fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, fibers[t].stack, fiber_stack);
#endif
            mp_fiber_switch(&scheduler, &fibers[t].ctx);
#if MP_FIBER_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
            waiting += !fibers[t].done;
        }
        if (waiting > 0 && waiting < live)
            fault("%s, block (%u,%u,%u): %u of %u threads wait at __syncthreads while the others "
                  "have returned", running_kernel, blockIdx.x, blockIdx.y, blockIdx.z, waiting, live);
        live = waiting;
    }
    in_coop = false;
}

cudaError_t launch(const char *name, bool coop, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                   size_t param_bytes, const void *const *ptrs, int nptrs, std::function<void()> body)
{
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "cudaemu: %s<<<(%u,%u,%u), (%u,%u,%u)>>>: invalid configuration\n", name,
                grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return set_error(cudaErrorInvalidConfiguration);
    }
    if (shmem > 48 * 1024) {
        fprintf(stderr, "cudaemu: %s: %zu bytes of dynamic shared memory (48 KiB without opting in)\n",
                name, shmem);
        return set_error(cudaErrorInvalidValue);
    }
    if (param_bytes > 32764)
        fault("%s: %zu bytes of parameters (at most 32764)", name, param_bytes);
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && !allocated(ptrs[i]))
            fault("%s: pointer argument %d (%p) is neither device nor page-locked host memory", name,
                  i, ptrs[i]);
    enqueue(s, name, [=](cudaStream_t) {
        running_kernel = name;
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = {x, y, z};
                    /* each block's dynamic shared memory is fresh, NaN-filled, exactly sized */
                    shared_dynamic = shmem ? malloc(shmem) : nullptr;
                    if (shmem)
                        memset(shared_dynamic, 0xff, shmem);
                    if (coop) {
                        run_block_fibers((unsigned)threads, body);
                    } else {
                        for (unsigned t = 0; t < threads; t++) {
                            block_index(t, block, &threadIdx);
                            body();
                        }
                    }
                    free(shared_dynamic);
                    shared_dynamic = nullptr;
                }
    });
    return cudaSuccess;
}

} // namespace cudaemu

using namespace cudaemu;

void __syncthreads(void)
{
    if (!in_coop)
        fault("%s calls __syncthreads but was launched as a kernel that does not (rewrite.py)",
              running_kernel);
    fiber &f = fibers[(size_t)current_fiber];
#if MP_FIBER_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, scheduler_bottom, scheduler_size);
#endif
    mp_fiber_switch(&f.ctx, &scheduler);
#if MP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, &scheduler_bottom, &scheduler_size);
#endif
}
