/* pid_map.c -- the thread that refreshes the containers' pid maps (see pid_map.h). */
#include "pid_map.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_usage.h"

struct pid_map {
    char *dir;
    const char *subdir; /* a constant of isolation.h */
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    struct usage_state state; /* the thread's own known processes */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    bool stopping;
};

static void *pid_map_main(void *arg)
{
    struct pid_map *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        pthread_mutex_unlock(&m->lock);
        usage_write_pid_maps(&m->state, m->dir, m->subdir, m->nvml, m->inv, NULL);
        pthread_mutex_lock(&m->lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += PID_MAP_INTERVAL_MS / 1000;
        until.tv_nsec += (long)(PID_MAP_INTERVAL_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!m->stopping && pthread_cond_timedwait(&m->wake, &m->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

int pid_map_start(const char *isolation_dir, const char *subdir, struct nvml *nvml,
                  const struct gpu_inventory *inv, struct pid_map **out, char *err, size_t errlen)
{
    *out = NULL;
    struct pid_map *m = calloc(1, sizeof *m);
    if (m == NULL || (m->dir = strdup(isolation_dir)) == NULL) {
        free(m);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->subdir = subdir;
    m->nvml = nvml;
    m->inv = inv;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&m->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&m->lock, NULL);
    int rc = pthread_create(&m->thread, NULL, pid_map_main, m);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the pid map thread: %s", strerror(rc));
        pthread_cond_destroy(&m->wake);
        pthread_mutex_destroy(&m->lock);
        free(m->dir);
        free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void pid_map_stop(struct pid_map *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    m->stopping = true;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->thread, NULL);
    usage_state_reset(&m->state);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    free(m->dir);
    free(m);
}
