/* gpupool-dlsym-race: isolation-review D6, in the order that deadlocks a
 * lookup layer which loads libcuda under a once-lock inside dlsym.
 *
 * libcuda.so.1 is already open (the application opened it at start) and no
 * CUDA name has been looked up yet. Thread A dlopen()s
 * libgpupool-ctor-dlsym.so, whose constructor (the loader's lock held)
 * sleeps, then calls dlsym(RTLD_DEFAULT, "cuInit"). Thread B, meanwhile,
 * looks up cuMemAlloc_v2 through the handle it already has -- no dlopen of
 * its own, so nothing makes it wait for the loader's lock before it enters
 * the layer's dlsym. Exit 0 with "ok" when both finish; 124 when hung
 * (alarm). Usage: gpupool-dlsym-race <path of libgpupool-ctor-dlsym.so> */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void *cuda;
static const char *ctor_lib;
static void *ctor_handle, *alloc_fn;

static void *thread_a(void *arg)
{
    (void)arg;
    ctor_handle = dlopen(ctor_lib, RTLD_NOW);
    return NULL;
}

static void *thread_b(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50 * 1000000L}; /* inside A's constructor */
    nanosleep(&ts, NULL);
    alloc_fn = dlsym(cuda, "cuMemAlloc_v2");
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
    _exit(124);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gpupool-dlsym-race <libgpupool-ctor-dlsym.so>\n");
        return 2;
    }
    ctor_lib = argv[1];
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL) {
        fprintf(stderr, "gpupool-dlsym-race: %s\n", dlerror());
        return 3;
    }
    signal(SIGALRM, on_alarm);
    alarm(10);
    pthread_t a, b;
    if (pthread_create(&a, NULL, thread_a, NULL) != 0 ||
        pthread_create(&b, NULL, thread_b, NULL) != 0)
        return 2;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("%s ctor=%s cuMemAlloc_v2=%s\n", ctor_handle && alloc_fn ? "ok" : "failed",
           ctor_handle ? "loaded" : dlerror(), alloc_fn ? "found" : "null");
    return ctor_handle && alloc_fn ? 0 : 1;
}
