/* sim_batch.c -- the seeds of a gpupool-sim run on a pool of threads
 * (sim_batch.h). Each replay is independent and reads the trace only, so
 * the threads share nothing but the next seed index and the first error. */
#include "sim_batch.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#define SIM_BATCH_MAX_THREADS 64

struct sim_batch {
    const struct sim_trace *trace;
    enum placement_policy policy;
    uint64_t first;
    unsigned demand_percent;
    struct sim_result *results;
    size_t count;
    atomic_size_t next;
    atomic_bool failed;
    pthread_mutex_t err_lock;
    char err[600]; /* room for a replay's 512-byte message and the seed */
};

static void *worker(void *arg)
{
    struct sim_batch *b = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->count || atomic_load(&b->failed))
            return NULL;
        char err[512];
        if (sim_replay(b->trace, b->policy, b->first + i, b->demand_percent, &b->results[i], err,
                       sizeof(err)) < 0) {
            pthread_mutex_lock(&b->err_lock);
            if (!atomic_exchange(&b->failed, true))
                snprintf(b->err, sizeof(b->err), "seed %" PRIu64 ": %s", b->first + i, err);
            pthread_mutex_unlock(&b->err_lock);
            return NULL;
        }
    }
}

int sim_batch_run(const struct sim_trace *trace, enum placement_policy policy, uint64_t first,
                  unsigned demand_percent, unsigned jobs, struct sim_result *results, size_t count,
                  char *err, size_t errlen)
{
    struct sim_batch b = {.trace = trace,
                          .policy = policy,
                          .first = first,
                          .demand_percent = demand_percent,
                          .results = results,
                          .count = count};
    atomic_init(&b.next, 0);
    atomic_init(&b.failed, false);
    if (pthread_mutex_init(&b.err_lock, NULL) != 0) {
        snprintf(err, errlen, "cannot create a mutex");
        return -1;
    }
    pthread_t threads[SIM_BATCH_MAX_THREADS];
    size_t want = jobs < count ? jobs : count, started = 0;
    if (want > SIM_BATCH_MAX_THREADS)
        want = SIM_BATCH_MAX_THREADS;
    for (; started < want; started++)
        if (pthread_create(&threads[started], NULL, worker, &b) != 0)
            break;
    if (started == 0)
        worker(&b); /* no thread could start: run here */
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&b.err_lock);
    if (atomic_load(&b.failed)) {
        snprintf(err, errlen, "%s", b.err);
        return -1;
    }
    return 0;
}
