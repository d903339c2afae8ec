/* fiber.h - a switch between execution contexts on one thread (fibers: the model's virtual ranks,
 * the CPU stand-in's synchronising block threads): on x86_64 a hand-written switch of the
 * callee-saved registers and the stack pointer, which leaves the signal mask alone (ucontext's
 * swapcontext makes a sigprocmask system call at every switch, and AddressSanitizer warns of it);
 * elsewhere, or built with -DMP_FIBER_UCONTEXT, getcontext, makecontext and swapcontext. */
#ifndef MP_FIBER_H
#define MP_FIBER_H

#include <stddef.h>

#if !defined(__x86_64__) || defined(MP_FIBER_UCONTEXT)
#include <ucontext.h>
#endif

/* MP_FIBER_ASAN: built with AddressSanitizer, which a fiber's user tells of every switch of stacks
 * (__sanitizer_start_switch_fiber before it, __sanitizer_finish_switch_fiber after). */
#if defined(__SANITIZE_ADDRESS__)
#define MP_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MP_FIBER_ASAN 1
#endif
#endif
#ifndef MP_FIBER_ASAN
#define MP_FIBER_ASAN 0
#endif
#if MP_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A suspended execution context: where mp_fiber_switch resumes it. */
struct mp_fiber_context {
#if defined(__x86_64__) && !defined(MP_FIBER_UCONTEXT)
    void *sp; /* its stack pointer, below the registers mp_fiber_switch saved */
#else
    ucontext_t uc;
#endif
};

/* Make c a context that, when first switched to, calls entry on the stack [stack, stack + size)
 * (size at least a few hundred bytes; the top is aligned down to 16 bytes). entry must never return:
 * it ends by switching away for good. The signal mask is the thread's, never saved or restored. */
void mp_fiber_make(struct mp_fiber_context *c, char *stack, size_t size, void (*entry)(void));

/* Save the running context in from and resume to: returns when some later mp_fiber_switch names
 * from as its to. Saved and restored: the registers a called function must preserve (x86_64: rbx,
 * rbp, r12-r15, rsp, the MXCSR and the x87 control word). Sanitizer annotations of the stack
 * change (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber) are the caller's. */
void mp_fiber_switch(struct mp_fiber_context *from, struct mp_fiber_context *to);

#ifdef __cplusplus
}
#endif

#endif
