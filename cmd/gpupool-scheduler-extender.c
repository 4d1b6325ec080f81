/* gpupool-scheduler-extender: kube-scheduler extender for GPU-memory sharing.
 *
 * Start-up order matters: the cache is listed from the API server before
 * the port opens, so kube-scheduler never meets a half-filled cache.
 * SIGTERM/SIGINT stop it cleanly (exit 0). */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "extender.h"
#include "log.h"

/* Waits for SIGTERM/SIGINT for up to ms; true when one arrived. */
static bool signalled(const sigset_t *set, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig > 0)
        log_info("signal %s: shutting down", strsignal(sig));
    return sig > 0;
}

/* Free heap memory, in bytes, that a burst must add before the main loop
 * hands pages back. */
#define TRIM_AFTER_FREED (256 * 1024)

/* Called once a second: hands the heap's free pages back after a burst.
 * A 5,000-node filter or prioritize frees blocks of 100-250 KiB (the body's
 * buffer, the names, the answer). glibc raises its mmap threshold to the
 * largest block freed and its trim threshold to twice that, so after the
 * first burst these come from the heap, which keeps its high-water mark
 * (~2 MiB after 4 concurrent connections), and pod events leave pages free
 * among the cache's long-lived records, which the top-only trim of free()
 * cannot return. Keeping the working set while requests come costs
 * nothing; mapping each block per request instead (a fixed mmap threshold)
 * cost ~0.15 ms of filter CPU at 5,000 nodes in page faults. So when the
 * free memory has grown by TRIM_AFTER_FREED since its lowest point since
 * the last trim (a burst is over, or shrinking), malloc_trim returns every
 * whole free page. It walks the free chunks holding the heap's lock: well
 * under a millisecond for this heap, at most once a second, only after
 * such a burst. `low`: that lowest point. */
static void trim_after_burst(size_t *low)
{
    struct mallinfo2 mi = mallinfo2();
    if (mi.fordblks < *low + TRIM_AFTER_FREED) {
        if (mi.fordblks < *low)
            *low = mi.fordblks;
        return;
    }
    malloc_trim(0);
    *low = mallinfo2().fordblks;
}

int main(int argc, char **argv, char **envp)
{
    struct extender_config cfg = {0};
    char err[1024];
    switch (extender_config_load(&cfg, argc, argv, envp, err, sizeof(err))) {
    case EXTENDER_CONFIG_EXIT:
        return 0;
    case EXTENDER_CONFIG_ERROR:
        fprintf(stderr, "gpupool-scheduler-extender: %s\n", err);
        return 2;
    case EXTENDER_CONFIG_OK:
        break;
    }
    /* Few malloc arenas: the request threads come and go, and a per-thread
     * arena each would multiply the resident heap. */
    mallopt(M_ARENA_MAX, 1);

    /* Signals go to the main thread only (threads inherit this mask). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    struct extender *ext = extender_new(&cfg, err, sizeof(err));
    if (!ext) {
        log_error("%s", err);
        goto out;
    }
    log_info("gpupool-scheduler-extender %s: policy %s, syncing nodes, pods and ConfigMaps",
             GP_VERSION,
             cfg.policy == 0   ? "gpupool"
             : cfg.policy == 1 ? "binpack"
                               : "spread");
    if (extender_start_sync(ext, err, sizeof(err)) < 0) {
        log_error("%s", err);
        goto out;
    }
    while (!extender_wait_synced(ext, 200)) {
        if (signalled(&set, 0)) {
            status = 0;
            goto out;
        }
    }
    malloc_trim(0); /* the LIST pages are gone: give their memory back */
    if (extender_serve(ext, err, sizeof(err)) < 0) {
        log_error("%s", err);
        goto out;
    }
    log_info("cache synced; serving %s on port %d (prefixes %s and %s)",
             *cfg.tls_cert ? "HTTPS" : "HTTP", extender_port(ext), cfg.prefix,
             EXTENDER_GPUSHARE_PREFIX);
    size_t low = mallinfo2().fordblks;
    while (!signalled(&set, 1000))
        trim_after_burst(&low);
    status = 0;
out:
    extender_free(ext);
    extender_config_free(&cfg);
    return status;
}
