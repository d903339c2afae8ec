/* lsan_keep_modules.c - preloaded into the tests of a gcc AddressSanitizer build
 * (tests/meson.build): dlclose leaves the library mapped, so the Open MPI plugins a process opens
 * and closes at start-up stay in its module list. LeakSanitizer, at exit, then places their
 * frames instead of re-reading /proc/self/maps for each frame it cannot (most of a sanitized MPI
 * process's exit time); what it reports is unchanged, as their allocations' stacks reach
 * tests/lsan.supp's libraries either way. */
#include <dlfcn.h>

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
