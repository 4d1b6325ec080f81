/* clock.c -- monotonic and wall time, absolute deadlines (see clock.h). */
#include "clock.h"

#define NS_PER_S 1000000000LL

static int64_t read_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

int64_t clock_now_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}
int64_t clock_now_us(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000;
}
int64_t clock_now_ms(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000000;
}
int64_t clock_wall_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}

struct timespec clock_deadline(clockid_t clock, long ms)
{
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= NS_PER_S) {
        t.tv_sec++;
        t.tv_nsec -= NS_PER_S;
    }
    return t;
}

void clock_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

struct timespec clock_timespec_ms(int64_t ms)
{
    return (struct timespec){.tv_sec = (time_t)(ms / 1000),
                             .tv_nsec = (long)(ms % 1000) * 1000000L};
}
