/* fiber.h - the stand-in's switch between execution contexts on one thread (the fibers that run a
 * synchronising block's threads): on x86_64 a hand-written switch of the callee-saved registers and
 * the stack pointer, which leaves the signal mask alone (ucontext's swapcontext makes a sigprocmask
 * system call at every switch); elsewhere, or built with -DCUDAEMU_FIBER_UCONTEXT, getcontext,
 * makecontext and swapcontext. */
#ifndef CUDAEMU_FIBER_H
#define CUDAEMU_FIBER_H

#include <stddef.h>

#if !defined(__x86_64__) || defined(CUDAEMU_FIBER_UCONTEXT)
#include <ucontext.h>
#endif

namespace cudaemu {

/* A suspended execution context: where fiber_switch resumes it. */
struct fiber_context {
#if defined(__x86_64__) && !defined(CUDAEMU_FIBER_UCONTEXT)
    void *sp; /* its stack pointer, below the registers fiber_switch saved */
#else
    ucontext_t uc;
#endif
};

/* Make c a context that, when first switched to, calls entry on the stack [stack, stack + size)
 * (size at least a few hundred bytes; the top is aligned down to 16 bytes). entry must never return:
 * it ends by switching away for good. The signal mask is the thread's, never saved or restored. */
void fiber_make(fiber_context *c, char *stack, size_t size, void (*entry)(void));

/* Save the running context in from and resume to: returns when some later fiber_switch names from
 * as its to. Saved and restored: the registers a called function must preserve (x86_64: rbx, rbp,
 * r12-r15, rsp, the MXCSR and the x87 control word). Sanitizer annotations of the stack change
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber) are the caller's. */
void fiber_switch(fiber_context *from, fiber_context *to);

} // namespace cudaemu

#endif
