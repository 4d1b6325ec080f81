/* kube_writer.h -- keeps one piece of API state true: the desired state,
 * written by a caller's function until it lands, with jittered backoff and
 * a Warning Event when the writes keep failing.
 *
 * A program that owns some state in the API server (a node's labels, its
 * GPU count, the ResourceSlices of its GPUs) needs the same loop each time:
 * hold what the state should be, write it, on failure wait a growing,
 * jittered delay (and at least the server's Retry-After), try again, say so
 * where people look (`kubectl describe`) when it goes on failing, and write
 * again when the desired state or the server's copy changes. The writer is
 * that loop, once; the caller supplies only "make the server match this"
 * (kube_writer_fn), which may GET, PATCH, PUT, POST and DELETE (kube.h) as
 * it needs.
 *
 *   desired  a JSON value the caller sets (kube_writer_set) whenever what
 *            it wants changes; the writer holds one reference to the
 *            latest and hands it to each attempt (a reference of its own,
 *            so a set during an attempt never frees it under the caller).
 *   kick     kube_writer_kick: "the server's copy may have changed" (a
 *            watch saw someone else write or delete it): attempt again.
 *   attempt  write(desired, ctx, err) runs in the writer's own thread,
 *            one at a time. 0: the server matches; -1: failed (err says
 *            why), attempted again after the backoff. A set or a kick
 *            during an attempt makes another attempt follow it.
 *   backoff  kube_retry_delay_ms with the options' policy: doubling from
 *            initial_backoff_ms to max_backoff_ms, times [0.5, 1) jitter,
 *            never less than a Retry-After. A set or kick while failing
 *            does not cut the wait short (it protects a struggling server);
 *            the next attempt simply writes the newest desired state.
 *   Event    after `event_after` failures in a row, one Warning Event
 *            (reason options.event_reason) about options.about, then one
 *            more every event_every_ms while the failures go on; a failed
 *            Event is only logged. Every failure is logged at warning level,
 *            and the first success after failures at info level.
 *   resync   resync_ms > 0: after a success, attempt again after that long
 *            even without a set or kick (a state with no watch on it).
 *
 * Ownership: the writer borrows the client (it must outlive the writer)
 * and copies the options' strings. kube_writer_stop joins the thread; an
 * attempt that is running is finished first (the client's own timeouts
 * bound it), no attempt starts after it returns.
 * Thread-safety: every function may be called from any thread, except
 * kube_writer_stop, which must not be called from inside write(). */
#ifndef GP_KUBE_WRITER_H
#define GP_KUBE_WRITER_H

#include "kube.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

struct kube_writer;

/* One attempt to make the server match `desired` (borrowed; NULL when the
 * caller never set one). Returns 0 when it does, -1 with err filled. */
typedef int (*kube_writer_fn)(json_t *desired, void *ctx, struct kube_error *err);

struct kube_writer_options {
    const char *what;               /* logs and Events say "Cannot write the <what>: ..." */
    struct kube_retry_policy retry; /* zeros: 200 ms doubling up to 30 s */
    long resync_ms;                 /* 0: attempt only on a set, a kick, or after a failure */
    int event_after;                /* failures in a row before an Event; 0 = 3; < 0: never */
    long event_every_ms;            /* 0 = 600000 */
    struct kube_object_ref about;   /* the Event's object; about.name NULL: no Events */
    const char *event_reason;       /* CamelCase; NULL: "WriteFailed" */
    const char *component;          /* the Event's source; NULL: "gpupool" */
    const char *host;               /* reportingInstance (the node); may be NULL */
};

struct kube_writer_stats {
    uint64_t attempts; /* write() calls */
    uint64_t failures; /* of which failed */
    uint64_t events;   /* Warning Events posted (successfully) */
    int failing;       /* failures in a row now; 0 after a success */
    bool synced;       /* the last attempt succeeded and nothing asked for another */
};

/* Starts the writer's thread. The first attempt runs at once (with desired
 * NULL unless `desired` is given: a reference is taken). NULL + err on
 * failure (out of memory, no thread). */
GP_MUST_USE struct kube_writer *kube_writer_start(struct kube_client *client,
                                                  const struct kube_writer_options *opt,
                                                  json_t *desired, kube_writer_fn write, void *ctx,
                                                  char *err, size_t errlen);

/* Replaces the desired state (steals the reference; NULL allowed) and asks
 * for an attempt. */
void kube_writer_set(struct kube_writer *w, json_t *desired);

/* Asks for an attempt with the same desired state. */
void kube_writer_kick(struct kube_writer *w);

/* Waits until the writer is synced (stats.synced) or timeout_ms passes;
 * true when synced. */
bool kube_writer_wait_synced(struct kube_writer *w, long timeout_ms);

void kube_writer_stats(struct kube_writer *w, struct kube_writer_stats *out);

/* Stops and frees (NULL is fine). Drops the desired state. */
void kube_writer_stop(struct kube_writer *w);

#endif
