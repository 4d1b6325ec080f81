/* cuda_throttle.c -- the compute limiter's arithmetic (see cuda_throttle.h). */
#include "cuda_glibc.h"
#include "cuda_throttle.h"

void throttle_account(struct throttle_shared *s, uint64_t now, uint64_t busy_ns, unsigned percent)
{
    if (percent == 0 || busy_ns == 0)
        return;
    if (percent > 100)
        percent = 100;
    /* busy * 100 / percent without overflow: busy is at most a second's
     * worth per sample in practice, and saturating is harmless. */
    uint64_t cost = busy_ns > UINT64_MAX / 100 ? UINT64_MAX / percent : busy_ns * 100 / percent;
    __atomic_fetch_add(&s->busy_ns, busy_ns, __ATOMIC_RELAXED);
    uint64_t floor = now > THROTTLE_BURST_NS ? now - THROTTLE_BURST_NS : 0;
    uint64_t tat = __atomic_load_n(&s->tat_ns, __ATOMIC_RELAXED), next;
    do {
        /* A tat far ahead of now (a damaged file, another time namespace)
         * would stop the container for good: it is clamped to a second. */
        uint64_t base = tat < floor ? floor : tat;
        if (base > now + 1000000000ull)
            base = now;
        next = base + cost < base ? UINT64_MAX : base + cost;
    } while (!__atomic_compare_exchange_n(&s->tat_ns, &tat, next, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
}

uint64_t throttle_delay(const struct throttle_shared *s, uint64_t now)
{
    uint64_t tat = __atomic_load_n(&s->tat_ns, __ATOMIC_RELAXED);
    return tat > now ? tat - now : 0;
}

uint64_t throttle_busy_from_samples(const nvmlProcessUtilizationSample_t *samples, unsigned n,
                                    unsigned pid, unsigned long long *last_us)
{
    unsigned long long last = *last_us, newest = last;
    uint64_t busy = 0;
    /* The driver's samples come oldest first; each of ours covers the time
     * since the one before it. */
    unsigned long long prev = last;
    for (unsigned i = 0; i < n; i++) {
        const nvmlProcessUtilizationSample_t *s = &samples[i];
        if (s->timeStamp > newest)
            newest = s->timeStamp;
        if (s->pid != pid || s->timeStamp <= prev)
            continue;
        unsigned long long span = s->timeStamp - prev;
        if (prev == 0 || span > THROTTLE_SAMPLE_MAX_US)
            span = THROTTLE_SAMPLE_MAX_US;
        unsigned util = s->smUtil > 100 ? 100 : s->smUtil;
        busy += (uint64_t)span * 1000ull * util / 100;
        prev = s->timeStamp;
    }
    *last_us = newest;
    return busy;
}

bool throttle_yields(uint64_t high_seen_ns, uint64_t now)
{
    if (high_seen_ns == 0)
        return false;
    return high_seen_ns > now || now - high_seen_ns < THROTTLE_PRIORITY_GRACE_NS;
}
