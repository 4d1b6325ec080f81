/* leader.h -- leader election of extender replicas on a coordination.k8s.io/v1 Lease.
 *
 * Only the Lease holder binds (docs/ha.md has the design and why it cannot
 * over-commit). A thread of its own runs client-go's algorithm:
 *   - a candidate GETs the Lease every retry period; it takes it (a PUT
 *     guarded by the resourceVersion it read; create when absent) when the
 *     holderIdentity is empty or the record has stayed unchanged for the
 *     lease duration on THIS process's monotonic clock (timestamps written
 *     by other machines are never compared with ours);
 *   - the holder renews every retry period (PUT guarded by its last
 *     resourceVersion); a 409 means someone else wrote the Lease;
 *   - the holder may bind only while now < fence = (monotonic start of its
 *     last successful write) + lease duration - margin, and each bind's
 *     API deadline is clamped to the fence; when no renew succeeded for the
 *     renew deadline it steps down;
 *   - after every acquisition the holder's cache must be proven current
 *     (the caller's hook re-lists pods and nodes; leader_mark_synced) before
 *     the first bind;
 *   - leader_stop() releases a held Lease (holderIdentity "") once the
 *     binds in flight have ended, so a successor takes over at once.
 * The holder's bind URL travels in the Lease annotation gpupool.io/bind-url.
 *
 * Threads: leader_new/start/stop/free from one thread (main); the others
 * from any thread (the /bind handlers). One mutex guards the state, never
 * held across network I/O; the hooks are called without it.
 * Ownership: the leader copies the config's strings; it borrows the API
 * client (one of its own: the caller gives it a short timeout, no retries).
 * Errors: 0/-1 with err. */
#ifndef GP_EXTENDER_LEADER_H
#define GP_EXTENDER_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube.h"
#include "compiler.h"

#define LEADER_BIND_URL_ANNOTATION "gpupool.io/bind-url"
#define LEADER_URL_MAX 512
#define LEADER_IDENTITY_MAX 256

enum leader_role {
    LEADER_ROLE_CANDIDATE, /* no live holder known, or the holder is unknown */
    LEADER_ROLE_FOLLOWER,  /* another replica holds the Lease */
    LEADER_ROLE_SYNCING,   /* holder, cache not yet proven current */
    LEADER_ROLE_HOLDER,    /* holder, cache current: binds */
    LEADER_ROLES
};
const char *leader_role_name(enum leader_role role); /* "candidate", "follower", ... */

struct leader_config {
    const char *lease_namespace, *lease_name;
    const char *identity; /* holderIdentity; NULL: leader_default_identity() */
    const char *bind_url; /* advertised in the Lease; "" when none (followers then refuse) */
    int lease_duration_ms, renew_deadline_ms, retry_period_ms, margin_ms;
    /* Called on the leader thread after each acquisition, with the new
     * epoch: re-list what the cache needs, then call leader_mark_synced. */
    void (*on_acquired)(void *ctx, uint64_t epoch);
    void (*on_role)(void *ctx, enum leader_role role); /* every change; may be NULL */
    void *ctx;
};

/* Checks the durations: retry < renew deadline < duration - margin, margin
 * > 0 (the fence would otherwise end after a successor could start). */
int leader_config_check(const struct leader_config *cfg, char *err, size_t errlen) GP_MUST_USE;

/* "<hostname>_<16 random hex digits>" into out. 0/-1. */
int leader_default_identity(char *out, size_t len, char *err, size_t errlen) GP_MUST_USE;

struct leader;
struct leader *leader_new(const struct leader_config *cfg, struct kube_client *client, char *err,
                          size_t errlen) GP_MUST_USE;
int leader_start(struct leader *l, char *err, size_t errlen) GP_MUST_USE;
/* Stops the thread; a holder stops granting binds, waits for the ones in
 * flight (their deadlines end at the fence) and releases the Lease. */
void leader_stop(struct leader *l);
void leader_free(struct leader *l);

/* The epoch of the latest acquisition (0: none yet), for the caller's
 * re-list bookkeeping; any thread. */
uint64_t leader_epoch(struct leader *l);
/* The cache's pods and nodes were listed afresh after acquisition `epoch`
 * began: binds may start (ignored for an older epoch). */
void leader_mark_synced(struct leader *l, uint64_t epoch);

/* What /bind may do now. */
enum leader_verdict { LEADER_BIND, LEADER_FORWARD, LEADER_REFUSE };
struct leader_permit {
    enum leader_verdict verdict;
    int64_t fence_ns;         /* LEADER_BIND: clock_now_ns() instant no API call may outlive */
    char url[LEADER_URL_MAX]; /* LEADER_FORWARD: the holder's bind URL */
    char why[160];            /* LEADER_REFUSE: for the ExtenderBindingResult Error */
};
/* Decides under the lock; a LEADER_BIND counts the bind as in flight until
 * leader_bind_end() (leader_stop waits for it). */
void leader_bind_begin(struct leader *l, struct leader_permit *p);
void leader_bind_end(struct leader *l);

enum leader_role leader_role(struct leader *l);

#endif
