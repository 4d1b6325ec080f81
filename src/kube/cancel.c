/* cancel.c -- cancellation tokens for watches, reflectors and retry sleeps.
 *
 * A token wakes two kinds of waiter at once: a thread asleep in
 * kube_cancel_sleep() (a condition variable on CLOCK_MONOTONIC) and a
 * watch blocked in curl_multi_poll() (curl_multi_wakeup() on every multi
 * handle attached to it). Both live here, below kube.c, list.c, watch.c and
 * reflector.c, which all wait on it. */
#include "client.h"
#include "clock.h"

#include <errno.h>
#include <stdlib.h>

struct kube_cancel {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC, for kube_cancel_sleep */
    bool fired;
    struct cancel_reg *watches; /* multi handles of the watches to wake */
};

struct kube_cancel *kube_cancel_new(void)
{
    struct kube_cancel *cancel = calloc(1, sizeof *cancel);
    if (cancel == NULL)
        return NULL;
    pthread_mutex_init(&cancel->lock, NULL);
    clock_cond_init(&cancel->cond);
    return cancel;
}

void kube_cancel_free(struct kube_cancel *cancel)
{
    if (cancel == NULL)
        return;
    pthread_mutex_destroy(&cancel->lock);
    pthread_cond_destroy(&cancel->cond);
    free(cancel);
}

void kube_cancel_fire(struct kube_cancel *cancel)
{
    pthread_mutex_lock(&cancel->lock);
    cancel->fired = true;
    for (struct cancel_reg *r = cancel->watches; r != NULL; r = r->next)
        r->curl->multi_wakeup(r->multi);
    pthread_cond_broadcast(&cancel->cond);
    pthread_mutex_unlock(&cancel->lock);
}

void kube_cancel_reset(struct kube_cancel *cancel)
{
    pthread_mutex_lock(&cancel->lock);
    cancel->fired = false;
    pthread_mutex_unlock(&cancel->lock);
}

bool kube_cancel_fired(struct kube_cancel *cancel)
{
    pthread_mutex_lock(&cancel->lock);
    bool fired = cancel->fired;
    pthread_mutex_unlock(&cancel->lock);
    return fired;
}

bool kube_cancel_sleep(struct kube_cancel *cancel, long ms)
{
    struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, ms);
    if (cancel == NULL) {
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL) == EINTR)
            ;
        return false;
    }
    pthread_mutex_lock(&cancel->lock);
    while (!cancel->fired &&
           pthread_cond_timedwait(&cancel->cond, &cancel->lock, &deadline) != ETIMEDOUT)
        ;
    bool fired = cancel->fired;
    pthread_mutex_unlock(&cancel->lock);
    return fired;
}

void kube_cancel_attach(struct kube_cancel *cancel, struct cancel_reg *reg)
{
    pthread_mutex_lock(&cancel->lock);
    reg->next = cancel->watches;
    cancel->watches = reg;
    pthread_mutex_unlock(&cancel->lock);
}

void kube_cancel_detach(struct kube_cancel *cancel, struct cancel_reg *reg)
{
    pthread_mutex_lock(&cancel->lock);
    for (struct cancel_reg **p = &cancel->watches; *p != NULL; p = &(*p)->next) {
        if (*p == reg) {
            *p = reg->next;
            break;
        }
    }
    pthread_mutex_unlock(&cancel->lock);
}
