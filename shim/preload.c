/*
 * preload.c - the LD_PRELOAD build's dlsym override (only in libmsched.so, not libcuda.so.1).
 *
 * Design
 *   Preloaded, libmsched's cu* exports come first in the global scope, so programs linked
 *   with -lcuda call the hooks. Libraries that dlopen("libcuda.so.1") and dlsym each name
 *   (cuBLASLt, Triton, NCCL...) get the real driver's handle, though, and dlsym on it would
 *   return the real functions. So this build exports its own dlsym:
 *     - dlsym(h, "cu...") where h is the real driver libmsched forwards to, or any object
 *       whose file name starts with "libcuda.so", returns libmsched's hook when the symbol is
 *       hooked (shim/hooks.def) and the real function otherwise;
 *     - everything else goes to the C library's dlsym unchanged.
 *   dlsym(RTLD_NEXT, ...) depends on *who calls*: glibc finds the caller from the return
 *   address. A C wrapper would make libmsched the caller, so the entry point is a few
 *   instructions of assembly that tail-jump to the C library's dlsym for RTLD_NEXT, leaving
 *   the caller's return address in place. The C library's dlsym is found with
 *   dlvsym(RTLD_NEXT, "dlsym", version), never with dlsym (which is this function).
 *
 *   The override never loads the driver for a lookup that is not a cu* name on a libcuda
 *   handle, so preloading into processes that never use CUDA costs nothing.
 */
#include "shim/shim_int.h"

#include "cuabi/procaddr.h"
#include "shim/shim_events.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#if !defined(__x86_64__)
#error "libmsched's dlsym override is x86-64 only"
#endif

/* Sanitizer runtimes call dlsym while they initialise, before instrumented code may run:
 * the path from the dlsym entry point to the C library's dlsym is not instrumented. */
#define NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

typedef void *(*dlsym_fn)(void *, const char *);
MS_HIDDEN dlsym_fn ms__shim_next_dlsym; /* read by the assembly below */
MS_HIDDEN dlsym_fn ms__shim_dlsym_init(void);
MS_HIDDEN void *ms__shim_dlsym(void *handle, const char *name);

NO_SANITIZE dlsym_fn ms__shim_dlsym_init(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    dlsym_fn f = __atomic_load_n(&ms__shim_next_dlsym, __ATOMIC_ACQUIRE);
    for (size_t i = 0; !f && i < MS_ARRAY_LEN(versions); i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f)
        __atomic_store_n(&ms__shim_next_dlsym, f, __ATOMIC_RELEASE);
    return f;
}

/* clang-format off */
__asm__(
    "    .text\n"
    "    .p2align 4\n"
    "    .globl dlsym\n"
    "    .type dlsym, @function\n"
    "dlsym:\n"
    "    .cfi_startproc\n"
    "    cmpq $-1, %rdi\n"               /* RTLD_NEXT */
    "    je 1f\n"
    "    jmp ms__shim_dlsym\n"
    "1:  movq ms__shim_next_dlsym(%rip), %rax\n"
    "    testq %rax, %rax\n"
    "    jz 2f\n"
    "    jmpq *%rax\n"
    "2:  pushq %rdi\n"
    "    .cfi_adjust_cfa_offset 8\n"
    "    pushq %rsi\n"
    "    .cfi_adjust_cfa_offset 8\n"
    "    subq $8, %rsp\n"
    "    .cfi_adjust_cfa_offset 8\n"
    "    call ms__shim_dlsym_init\n"
    "    addq $8, %rsp\n"
    "    .cfi_adjust_cfa_offset -8\n"
    "    popq %rsi\n"
    "    .cfi_adjust_cfa_offset -8\n"
    "    popq %rdi\n"
    "    .cfi_adjust_cfa_offset -8\n"
    "    testq %rax, %rax\n"
    "    jz 3f\n"
    "    jmpq *%rax\n"
    "3:  ret\n"                        /* no C library dlsym: NULL */
    "    .cfi_endproc\n"
    "    .size dlsym, .-dlsym\n");
/* clang-format on */

/* True when h is a CUDA driver handle: the one libmsched uses, or a file named libcuda.so*. */
static bool is_libcuda(void *h)
{
    struct link_map *lm = NULL;
    if (h == RTLD_DEFAULT || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name)
        return false;
    const char *base = strrchr(lm->l_name, '/');
    base = base ? base + 1 : lm->l_name;
    if (strncmp(base, "libcuda.so", 10) == 0)
        return true;
    void *real = ms__shim_real_handle();
    return real && h == real;
}

NO_SANITIZE void *ms__shim_dlsym(void *handle, const char *name)
{
    dlsym_fn next = __atomic_load_n(&ms__shim_next_dlsym, __ATOMIC_ACQUIRE);
    if (!next)
        next = ms__shim_dlsym_init();
    if (!next)
        return NULL;
    if (name && name[0] == 'c' && name[1] == 'u') {
        void *hook = ms__shim_hook_for(ms_sym_index(name));
        if (hook && is_libcuda(handle)) {
            ms__drv_init();
            ms_shim_on_dlsym_hooked();
            return hook;
        }
    }
    return next(handle, name);
}
