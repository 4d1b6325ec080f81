/* kube_writer.c -- the desired-state writer (see kube_writer.h). */
#include "kube_writer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

#define DEFAULT_INITIAL_BACKOFF_MS 200
#define DEFAULT_MAX_BACKOFF_MS 30000
#define DEFAULT_EVENT_AFTER 3
#define DEFAULT_EVENT_EVERY_MS 600000

struct kube_writer {
    struct kube_client *client; /* borrowed */
    kube_writer_fn write;
    void *ctx;
    pthread_t thread;

    /* Copies of the options' strings (one owner: the writer). */
    char *what, *reason, *component, *host;
    char *about_api_version, *about_kind, *about_ns, *about_name, *about_uid;
    struct kube_retry_policy retry;
    long resync_ms, event_every_ms;
    int event_after;

    pthread_mutex_t lock; /* everything below */
    pthread_cond_t wake;  /* a set, a kick, stop; and "an attempt ended" for waiters */
    json_t *desired;
    bool pending; /* an attempt is asked for */
    bool running; /* an attempt is in write() now */
    bool stopping;
    int64_t due_ms;        /* the next attempt not before this (backoff) */
    int64_t resync_due_ms; /* 0: none */
    int64_t last_event_ms; /* of this failure streak; 0: none yet */
    struct kube_writer_stats stats;
};

static char *dup_or_null(const char *s, bool *oom)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *oom = true;
    return d;
}

static void writer_free(struct kube_writer *w)
{
    json_decref(w->desired);
    free(w->what);
    free(w->reason);
    free(w->component);
    free(w->host);
    free(w->about_api_version);
    free(w->about_kind);
    free(w->about_ns);
    free(w->about_name);
    free(w->about_uid);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* Posts the streak's Warning Event when it is due. Called without the lock. */
static void maybe_event(struct kube_writer *w, int failing, const struct kube_error *kerr)
{
    if (w->about_name == NULL || w->event_after < 0 || failing < w->event_after)
        return;
    int64_t now = clock_now_ms();
    pthread_mutex_lock(&w->lock);
    bool due = w->last_event_ms == 0 || now - w->last_event_ms >= w->event_every_ms;
    if (due)
        w->last_event_ms = now;
    pthread_mutex_unlock(&w->lock);
    if (!due)
        return;
    char message[1024];
    /* The server keeps 1 KiB of a message: the error's own text is cut to fit. */
    snprintf(
        message, sizeof message,
        "Cannot write the %.200s: %d attempts failed in a row, the last: HTTP %d %.63s: %.680s",
        w->what, failing, kerr->http_status, kerr->reason, kerr->message);
    const struct kube_object_ref about = {.api_version = w->about_api_version,
                                          .kind = w->about_kind,
                                          .ns = w->about_ns,
                                          .name = w->about_name,
                                          .uid = w->about_uid};
    struct kube_error eerr = {0};
    if (kube_post_event(w->client, &about, true, w->reason, message, w->component, w->host,
                        &eerr) != 0) {
        log_warn("%s: cannot post the Warning Event %s: HTTP %d %s: %s", w->what, w->reason,
                 eerr.http_status, eerr.reason, eerr.message);
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->stats.events++;
    pthread_mutex_unlock(&w->lock);
}

static void *writer_main(void *arg)
{
    struct kube_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        int64_t now = clock_now_ms();
        if (!w->pending && w->resync_due_ms != 0 && now >= w->resync_due_ms) {
            w->pending = true;
            w->resync_due_ms = 0;
        }
        if (!w->pending || now < w->due_ms) {
            int64_t until = w->pending ? w->due_ms : w->resync_due_ms;
            if (until == 0) {
                pthread_cond_wait(&w->wake, &w->lock);
            } else {
                struct timespec ts = clock_timespec_ms(until);
                (void)pthread_cond_timedwait(&w->wake, &w->lock, &ts);
            }
            continue;
        }
        w->pending = false;
        w->running = true;
        w->stats.synced = false;
        json_t *desired = json_incref(w->desired);
        pthread_mutex_unlock(&w->lock);

        struct kube_error kerr = {0};
        int rc = w->write(desired, w->ctx, &kerr);
        json_decref(desired);

        pthread_mutex_lock(&w->lock);
        w->running = false;
        w->stats.attempts++;
        now = clock_now_ms();
        if (rc == 0) {
            if (w->stats.failing > 0)
                log_info("The %s written after %d failed attempts", w->what, w->stats.failing);
            w->stats.failing = 0;
            w->last_event_ms = 0;
            w->due_ms = 0;
            w->stats.synced = !w->pending;
            if (w->resync_ms > 0)
                w->resync_due_ms = now + w->resync_ms;
        } else {
            int failing = ++w->stats.failing;
            w->stats.failures++;
            long delay = kube_retry_delay_ms(w->client, &w->retry, failing, &kerr);
            w->due_ms = now + delay;
            w->pending = true; /* the state is still wrong: try again */
            pthread_mutex_unlock(&w->lock);
            log_warn(
                "Cannot write the %s: HTTP %d %s: %s; retrying in %ld ms (%d failures in a row)",
                w->what, kerr.http_status, kerr.reason, kerr.message, delay, failing);
            maybe_event(w, failing, &kerr);
            pthread_mutex_lock(&w->lock);
        }
        pthread_cond_broadcast(&w->wake); /* kube_writer_wait_synced */
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

struct kube_writer *kube_writer_start(struct kube_client *client,
                                      const struct kube_writer_options *opt, json_t *desired,
                                      kube_writer_fn write, void *ctx, char *err, size_t errlen)
{
    struct kube_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    clock_cond_init(&w->wake);
    w->client = client;
    w->write = write;
    w->ctx = ctx;
    bool oom = false;
    w->what = dup_or_null(opt->what != NULL ? opt->what : "API state", &oom);
    w->reason = dup_or_null(opt->event_reason != NULL ? opt->event_reason : "WriteFailed", &oom);
    w->component = dup_or_null(opt->component != NULL ? opt->component : "gpupool", &oom);
    w->host = dup_or_null(opt->host, &oom);
    if (opt->about.name != NULL) {
        w->about_api_version =
            dup_or_null(opt->about.api_version != NULL ? opt->about.api_version : "v1", &oom);
        w->about_kind = dup_or_null(opt->about.kind != NULL ? opt->about.kind : "Node", &oom);
        w->about_ns = dup_or_null(opt->about.ns, &oom);
        w->about_name = dup_or_null(opt->about.name, &oom);
        w->about_uid = dup_or_null(opt->about.uid, &oom);
    }
    if (oom) {
        snprintf(err, errlen, "out of memory");
        writer_free(w);
        return NULL;
    }
    w->retry = opt->retry;
    if (w->retry.initial_backoff_ms <= 0)
        w->retry.initial_backoff_ms = DEFAULT_INITIAL_BACKOFF_MS;
    if (w->retry.max_backoff_ms <= 0)
        w->retry.max_backoff_ms = DEFAULT_MAX_BACKOFF_MS;
    w->resync_ms = opt->resync_ms > 0 ? opt->resync_ms : 0;
    w->event_after = opt->event_after == 0 ? DEFAULT_EVENT_AFTER : opt->event_after;
    w->event_every_ms = opt->event_every_ms > 0 ? opt->event_every_ms : DEFAULT_EVENT_EVERY_MS;
    w->desired = json_incref(desired);
    w->pending = true;
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the writer thread of %s: %s", w->what, strerror(rc));
        writer_free(w);
        return NULL;
    }
    return w;
}

void kube_writer_set(struct kube_writer *w, json_t *desired)
{
    pthread_mutex_lock(&w->lock);
    json_t *old = w->desired;
    w->desired = desired;
    w->pending = true;
    w->stats.synced = false;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    json_decref(old);
}

void kube_writer_kick(struct kube_writer *w)
{
    pthread_mutex_lock(&w->lock);
    w->pending = true;
    w->stats.synced = false;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

bool kube_writer_wait_synced(struct kube_writer *w, long timeout_ms)
{
    struct timespec until = clock_timespec_ms(clock_now_ms() + timeout_ms);
    pthread_mutex_lock(&w->lock);
    while (!w->stats.synced && !w->stopping &&
           pthread_cond_timedwait(&w->wake, &w->lock, &until) == 0)
        ;
    bool synced = w->stats.synced;
    pthread_mutex_unlock(&w->lock);
    return synced;
}

void kube_writer_stats(struct kube_writer *w, struct kube_writer_stats *out)
{
    pthread_mutex_lock(&w->lock);
    *out = w->stats;
    pthread_mutex_unlock(&w->lock);
}

void kube_writer_stop(struct kube_writer *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    writer_free(w);
}
