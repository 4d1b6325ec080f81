/* ctor_dlsym.c -- libgpupool-ctor-dlsym.so, for the probe's ctor-deadlock:
 * a library whose constructor, run by dlopen() with the dynamic loader's
 * lock held, looks up cuInit through dlsym(RTLD_DEFAULT) after a short sleep
 * (long enough for another thread to start its first CUDA lookup). Whether
 * it found the symbol is left in gp_ctor_dlsym_found. Test-only. */
#include <dlfcn.h>
#include <errno.h>
#include <time.h>

#define CTOR_SLEEP_MS 200

__attribute__((visibility("default"))) int gp_ctor_dlsym_found = -1;

__attribute__((constructor)) static void ctor_lookup(void)
{
    struct timespec ts = {0, CTOR_SLEEP_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    gp_ctor_dlsym_found = dlsym(RTLD_DEFAULT, "cuInit") != NULL;
}
