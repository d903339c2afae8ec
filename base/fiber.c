/* fiber.c - the context switch of fibers (fiber.h): callee-saved registers pushed on the running
 * stack and the stack pointers exchanged on x86_64, ucontext elsewhere. */
#include "fiber.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__) && !defined(MP_FIBER_UCONTEXT)

/* mp_fiber_switch_stack(void **from_sp, void *to_sp): the System V AMD64 ABI's callee-saved state
 * (rbp, rbx, r12-r15, then one 8-byte slot with the MXCSR in its low half and the x87 control word
 * above it; System V AMD64 ABI, sections 3.2.1 and 3.2.3) pushed on the running stack, the stack
 * pointer stored in *from_sp, to_sp loaded and the same state popped from it; the ret then
 * returns into the switched-to context (or, the first time, into the entry mp_fiber_make left there). */
void mp_fiber_switch_stack(void **from_sp, void *to_sp);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl mp_fiber_switch_stack\n"
        ".hidden mp_fiber_switch_stack\n"
        ".type mp_fiber_switch_stack, @function\n"
        "mp_fiber_switch_stack:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size mp_fiber_switch_stack, .-mp_fiber_switch_stack\n");

/* not instrumented: the stack may still carry the shadow an abandoned fiber's frames poisoned,
 * which each instrumented frame rewrites for itself but which these plain stores would trip over */
__attribute__((no_sanitize_address)) void mp_fiber_make(struct mp_fiber_context *c, char *stack,
                                                        size_t size, void (*entry)(void))
{
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    void **slot = (void **)top;
    /* entry is entered by the switch's ret, as if called: its return address (a null one, where
     * unwinders stop) at top - 8, so the stack pointer is 8 off a 16-byte boundary as at any call */
    *--slot = NULL;
    *--slot = (void *)entry; /* what the first switch's ret returns into */
    for (int r = 0; r < 6; r++)
        *--slot = NULL; /* rbp (the end of the frame-pointer chain), rbx, r12-r15 */
    uint32_t mxcsr;
    uint16_t fpu_control;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpu_control));
    --slot;
    ((uint32_t *)slot)[0] = mxcsr;         /* the creator's floating-point modes, as getcontext */
    ((uint32_t *)slot)[1] = fpu_control;   /* would hand them to makecontext */
    c->sp = slot;
}

void mp_fiber_switch(struct mp_fiber_context *from, struct mp_fiber_context *to)
{
    mp_fiber_switch_stack(&from->sp, to->sp);
}

#else

void mp_fiber_make(struct mp_fiber_context *c, char *stack, size_t size, void (*entry)(void))
{
    if (getcontext(&c->uc) != 0) {
        perror("fiber: getcontext");
        abort();
    }
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}

void mp_fiber_switch(struct mp_fiber_context *from, struct mp_fiber_context *to)
{
    if (swapcontext(&from->uc, &to->uc) != 0) {
        perror("fiber: swapcontext");
        abort();
    }
}

#endif
