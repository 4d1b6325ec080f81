/* clock.h -- the one place that reads the clocks and adds to a timespec.
 *
 * Durations, timeouts and retry times use CLOCK_MONOTONIC (clock_now_*):
 * a wall-clock step (NTP, an operator) must not fire or stall them. Only
 * what is shown to people or other programs (annotation timestamps) uses
 * the wall clock (clock_wall_ns). clock_deadline() gives the absolute
 * timespec that pthread_cond_timedwait / clock_nanosleep want: pass the
 * clock the condition variable was created with (pthread_condattr_setclock;
 * CLOCK_REALTIME when it was not set).
 *
 * Threads: any. Errors: none (clock_gettime cannot fail for these clocks). */
#ifndef GP_CLOCK_H
#define GP_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Monotonic time since an arbitrary origin (boot). */
int64_t clock_now_ms(void);
int64_t clock_now_us(void);
int64_t clock_now_ns(void);
/* Wall-clock nanoseconds since the epoch. */
int64_t clock_wall_ns(void);

/* Now on `clock` plus ms (>= 0), tv_nsec normalised to [0, 1e9). */
struct timespec clock_deadline(clockid_t clock, long ms);

/* A time in clock_now_ms() terms (CLOCK_MONOTONIC milliseconds) as the
 * absolute timespec a clock_cond_init() condition variable waits for. */
struct timespec clock_timespec_ms(int64_t ms);

/* Initialises a condition variable whose timed waits run on CLOCK_MONOTONIC
 * (deadlines from clock_deadline(CLOCK_MONOTONIC, ...)). */
void clock_cond_init(pthread_cond_t *cond);

#endif
