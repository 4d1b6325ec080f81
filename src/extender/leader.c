/* leader.c -- Lease election of extender replicas and the bind fence (see leader.h). */
#include "leader.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

#define NS_PER_MS 1000000LL

struct leader {
    char *ns, *name, *identity, *bind_url;
    struct leader_config cfg; /* its strings point at the copies above */
    struct kube_client *client;
    char path[600], collection[600];
    pthread_t thread;
    bool started;

    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC: the loop's wait, leader_stop's wait for binds */
    bool stopping;
    bool holder;        /* our last write of the Lease succeeded and we have not stepped down */
    bool synced;        /* the cache was re-listed after this epoch's acquisition */
    uint64_t epoch;     /* acquisitions so far */
    int64_t fence_ns;   /* holder: binds end before this clock_now_ns() instant */
    int64_t last_ok_ns; /* holder: start of the last successful write */
    int inflight;       /* LEADER_BIND permits not yet ended */
    char holder_id[LEADER_IDENTITY_MAX];
    char holder_url[LEADER_URL_MAX];
    enum leader_role role;

    /* The leader thread's own (no lock): the Lease as last read or written. */
    json_t *record;
    char observed_rv[KUBE_RV_MAX];
    int64_t observed_at_ns; /* when observed_rv was first seen, our clock */
    int64_t expiry_ns;      /* another's live Lease may be taken from then on; 0: none */
};

const char *leader_role_name(enum leader_role role)
{
    static const char *const names[LEADER_ROLES] = {"candidate", "follower", "syncing", "holder"};
    return (unsigned)role < LEADER_ROLES ? names[role] : "unknown";
}

int leader_config_check(const struct leader_config *cfg, char *err, size_t errlen)
{
    if (!cfg->lease_namespace || !*cfg->lease_namespace || !cfg->lease_name || !*cfg->lease_name ||
        strchr(cfg->lease_namespace, '/') || strchr(cfg->lease_name, '/')) {
        snprintf(err, errlen, "the lease wants a namespace and a name (namespace/name)");
        return -1;
    }
    if (cfg->lease_duration_ms < 1000 || cfg->lease_duration_ms % 1000) {
        snprintf(err, errlen, "lease duration %d ms: want whole seconds (leaseDurationSeconds)",
                 cfg->lease_duration_ms);
        return -1;
    }
    if (cfg->margin_ms <= 0 || cfg->retry_period_ms <= 0 ||
        cfg->retry_period_ms >= cfg->renew_deadline_ms ||
        cfg->renew_deadline_ms >= cfg->lease_duration_ms - cfg->margin_ms) {
        snprintf(err, errlen,
                 "want 0 < retry period (%d ms) < renew deadline (%d ms) < lease duration (%d "
                 "ms) - margin (%d ms)",
                 cfg->retry_period_ms, cfg->renew_deadline_ms, cfg->lease_duration_ms,
                 cfg->margin_ms);
        return -1;
    }
    return 0;
}

int leader_default_identity(char *out, size_t len, char *err, size_t errlen)
{
    char host[256];
    unsigned char r[8];
    if (gethostname(host, sizeof(host)) != 0) {
        snprintf(err, errlen, "gethostname: %s", strerror(errno));
        return -1;
    }
    host[sizeof(host) - 1] = '\0';
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        return -1;
    }
    int n = snprintf(out, len, "%s_%02x%02x%02x%02x%02x%02x%02x%02x", host, r[0], r[1], r[2], r[3],
                     r[4], r[5], r[6], r[7]);
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, errlen, "host name %s too long for an identity", host);
        return -1;
    }
    return 0;
}

/* ---- the state, under the lock ------------------------------------------ */

static enum leader_role role_locked(const struct leader *l)
{
    if (l->holder)
        return l->synced ? LEADER_ROLE_HOLDER : LEADER_ROLE_SYNCING;
    if (l->holder_id[0] && strcmp(l->holder_id, l->identity) != 0)
        return LEADER_ROLE_FOLLOWER;
    return LEADER_ROLE_CANDIDATE;
}

/* Recomputes the role; true (and *role) when it changed: the caller tells
 * on_role once the lock is released. */
static bool role_update_locked(struct leader *l, enum leader_role *role)
{
    enum leader_role now = role_locked(l);
    if (now == l->role)
        return false;
    l->role = now;
    *role = now;
    return true;
}

static void tell_role(struct leader *l, enum leader_role role)
{
    log_info("leader election %s/%s: %s is now %s", l->ns, l->name, l->identity,
             leader_role_name(role));
    if (l->cfg.on_role)
        l->cfg.on_role(l->cfg.ctx, role);
}

uint64_t leader_epoch(struct leader *l)
{
    pthread_mutex_lock(&l->lock);
    uint64_t e = l->epoch;
    pthread_mutex_unlock(&l->lock);
    return e;
}

void leader_mark_synced(struct leader *l, uint64_t epoch)
{
    enum leader_role role;
    pthread_mutex_lock(&l->lock);
    if (l->holder && epoch == l->epoch)
        l->synced = true;
    bool changed = role_update_locked(l, &role);
    pthread_mutex_unlock(&l->lock);
    if (changed)
        tell_role(l, role);
}

enum leader_role leader_role(struct leader *l)
{
    pthread_mutex_lock(&l->lock);
    enum leader_role r = l->role;
    pthread_mutex_unlock(&l->lock);
    return r;
}

void leader_bind_begin(struct leader *l, struct leader_permit *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_lock(&l->lock);
    int64_t now = clock_now_ns();
    if (l->holder && !l->synced) {
        p->verdict = LEADER_REFUSE;
        snprintf(p->why, sizeof(p->why),
                 "not the leader yet (re-listing the cache after taking the lease), retry");
    } else if (l->holder && now >= l->fence_ns) {
        p->verdict = LEADER_REFUSE;
        snprintf(p->why, sizeof(p->why),
                 "not the leader (the lease was not renewed in time), retry");
    } else if (l->holder && !l->stopping) {
        p->verdict = LEADER_BIND;
        p->fence_ns = l->fence_ns;
        l->inflight++;
    } else if (!l->holder && l->holder_id[0] && l->holder_url[0] &&
               strcmp(l->holder_id, l->identity) != 0) {
        p->verdict = LEADER_FORWARD;
        snprintf(p->url, sizeof(p->url), "%s", l->holder_url);
    } else {
        p->verdict = LEADER_REFUSE;
        snprintf(p->why, sizeof(p->why), "not the leader, and no leader is known, retry");
    }
    pthread_mutex_unlock(&l->lock);
}

void leader_bind_end(struct leader *l)
{
    pthread_mutex_lock(&l->lock);
    if (l->inflight > 0 && --l->inflight == 0)
        pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* ---- the Lease object ------------------------------------------------------ */

/* MicroTime, as client-go writes it: 2006-01-02T15:04:05.000000Z. */
static json_t *micro_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char text[64];
    size_t n = strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(text + n, sizeof(text) - n, ".%06ldZ", ts.tv_nsec / 1000);
    return json_string(text);
}

static const char *lease_rv(const json_t *lease)
{
    const char *rv =
        json_string_value(json_object_get(json_object_get(lease, "metadata"), "resourceVersion"));
    return rv ? rv : "";
}

static const char *lease_holder(const json_t *lease)
{
    const char *h =
        json_string_value(json_object_get(json_object_get(lease, "spec"), "holderIdentity"));
    return h ? h : "";
}

static const char *lease_url(const json_t *lease)
{
    const json_t *ann = json_object_get(json_object_get(lease, "metadata"), "annotations");
    const char *u = json_string_value(json_object_get(ann, LEADER_BIND_URL_ANNOTATION));
    return u ? u : "";
}

/* The record's own duration, at least ours: a holder configured longer
 * than us is waited for as long as it promised. */
static int64_t lease_duration_ns(const struct leader *l, const json_t *lease)
{
    json_int_t s =
        json_integer_value(json_object_get(json_object_get(lease, "spec"), "leaseDurationSeconds"));
    int64_t ours = (int64_t)l->cfg.lease_duration_ms * NS_PER_MS;
    int64_t theirs = s > 0 && s < 86400 ? (int64_t)s * 1000 * NS_PER_MS : 0;
    return theirs > ours ? theirs : ours;
}

/* A copy of base (or a new Lease) naming us holder: spec as client-go keeps
 * it, our URL annotation, base's resourceVersion as the precondition. */
static json_t *lease_claim(const struct leader *l, const json_t *base, bool release)
{
    json_t *lease =
        base ? json_deep_copy(base)
             : json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "coordination.k8s.io/v1", "kind",
                         "Lease", "metadata", "name", l->name, "namespace", l->ns);
    if (!lease)
        return NULL;
    json_t *meta = json_object_get(lease, "metadata");
    json_t *spec = json_object_get(lease, "spec");
    if (!json_is_object(spec)) {
        spec = json_object();
        json_object_set_new(lease, "spec", spec);
    }
    json_t *ann = json_object_get(meta, "annotations");
    if (!json_is_object(ann)) {
        ann = json_object();
        json_object_set_new(meta, "annotations", ann);
    }
    bool ours = strcmp(lease_holder(lease), l->identity) == 0;
    json_t *now = micro_time_now();
    if (release) {
        json_object_set_new(spec, "holderIdentity", json_string(""));
        json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
        json_object_set_new(ann, LEADER_BIND_URL_ANNOTATION, json_string(""));
    } else {
        if (!ours) {
            json_int_t t =
                json_integer_value(json_object_get(spec, "leaseTransitions")) + (base ? 1 : 0);
            json_object_set_new(spec, "leaseTransitions", json_integer(t));
            json_object_set(spec, "acquireTime", now);
        }
        json_object_set_new(spec, "holderIdentity", json_string(l->identity));
        json_object_set_new(spec, "leaseDurationSeconds",
                            json_integer(l->cfg.lease_duration_ms / 1000));
        json_object_set_new(ann, LEADER_BIND_URL_ANNOTATION, json_string(l->bind_url));
    }
    json_object_set(spec, "renewTime", now);
    json_decref(now);
    return lease;
}

/* ---- one round ------------------------------------------------------------ */

enum attempt { ATTEMPT_ERROR = -1, ATTEMPT_NOT_HELD = 0, ATTEMPT_HELD = 1 };

static void keep_record(struct leader *l, json_t *lease)
{
    json_decref(l->record);
    l->record = lease;
    const char *rv = lease_rv(lease);
    if (strcmp(rv, l->observed_rv) != 0) {
        snprintf(l->observed_rv, sizeof(l->observed_rv), "%s", rv);
        l->observed_at_ns = clock_now_ns();
    }
    pthread_mutex_lock(&l->lock);
    snprintf(l->holder_id, sizeof(l->holder_id), "%s", lease_holder(lease));
    snprintf(l->holder_url, sizeof(l->holder_url), "%s", lease_url(lease));
    pthread_mutex_unlock(&l->lock);
}

/* PUT (or POST when base is NULL) our claim; HELD, NOT_HELD on 409.
 * deadline_ns (0: none) bounds the PUT, credential fetch included. */
static enum attempt write_claim(struct leader *l, const json_t *base, int64_t deadline_ns)
{
    json_t *claim = lease_claim(l, base, false);
    json_t *stored = NULL;
    struct kube_error kerr = {0};
    if (!claim) {
        log_warn("lease %s/%s: out of memory", l->ns, l->name);
        return ATTEMPT_ERROR;
    }
    int rc = base ? kube_put_until(l->client, l->path, claim, deadline_ns, &stored, &kerr)
                  : kube_post(l->client, l->collection, claim, &stored, &kerr);
    json_decref(claim);
    if (rc == 0 && json_is_object(stored)) {
        keep_record(l, stored);
        return ATTEMPT_HELD;
    }
    json_decref(stored);
    if (kerr.http_status == 409) {
        log_v(2, "lease %s/%s: %s (someone else wrote it)", l->ns, l->name, kerr.message);
        json_decref(l->record); /* read it again next round */
        l->record = NULL;
        return ATTEMPT_NOT_HELD;
    }
    log_warn("lease %s/%s: writing failed: %s", l->ns, l->name, kerr.message);
    return ATTEMPT_ERROR;
}

/* renew_by_ns: the holder's step-down instant (last good write + renew
 * deadline). Its renew ends by then whatever it waits for, a credential
 * plugin that another thread (a bind) is running included, so that the
 * holder steps down on time instead of waiting with it (N1, docs/ha.md). */
static enum attempt try_acquire_or_renew(struct leader *l, bool holder, int64_t renew_by_ns)
{
    if (holder && l->record) /* renew: our last write is the version to replace */
        return write_claim(l, l->record, renew_by_ns);
    json_t *lease = NULL;
    struct kube_error kerr = {0};
    if (kube_get(l->client, l->path, &lease, &kerr) < 0) {
        if (kerr.http_status == 404)
            return write_claim(l, NULL, 0);
        log_v(1, "lease %s/%s: reading failed: %s", l->ns, l->name, kerr.message);
        return ATTEMPT_ERROR;
    }
    if (!json_is_object(lease)) {
        json_decref(lease);
        return ATTEMPT_ERROR;
    }
    keep_record(l, lease);
    const char *who = lease_holder(lease);
    l->expiry_ns = 0;
    if (who[0] && strcmp(who, l->identity) != 0 &&
        clock_now_ns() < l->observed_at_ns + lease_duration_ns(l, lease)) {
        l->expiry_ns = l->observed_at_ns + lease_duration_ns(l, lease);
        return ATTEMPT_NOT_HELD; /* a live holder: unchanged for less than its duration */
    }
    if (who[0] && strcmp(who, l->identity) != 0)
        log_info("lease %s/%s: holder %s did not renew for %d s; taking over", l->ns, l->name, who,
                 (int)(lease_duration_ns(l, lease) / (1000 * NS_PER_MS)));
    return write_claim(l, lease, 0);
}

static void *leader_thread(void *arg)
{
    struct leader *l = arg;
    pthread_mutex_lock(&l->lock);
    while (!l->stopping) {
        bool holder = l->holder;
        int64_t renew_by = l->last_ok_ns + (int64_t)l->cfg.renew_deadline_ms * NS_PER_MS;
        pthread_mutex_unlock(&l->lock);
        int64_t t0 = clock_now_ns(); /* before the write: the fence counts from here */
        enum attempt a = try_acquire_or_renew(l, holder, renew_by);
        uint64_t acquired = 0;
        enum leader_role role;
        pthread_mutex_lock(&l->lock);
        if (a == ATTEMPT_HELD) {
            if (!l->holder) {
                l->holder = true;
                l->synced = false;
                acquired = ++l->epoch;
            }
            l->last_ok_ns = t0;
            l->fence_ns = t0 + (int64_t)(l->cfg.lease_duration_ms - l->cfg.margin_ms) * NS_PER_MS;
        } else if (l->holder &&
                   (a == ATTEMPT_NOT_HELD || clock_now_ns() - l->last_ok_ns >=
                                                 (int64_t)l->cfg.renew_deadline_ms * NS_PER_MS)) {
            l->holder = false; /* lost, or no renew for the renew deadline: step down */
            l->synced = false;
            log_warn("lease %s/%s: %s", l->ns, l->name,
                     a == ATTEMPT_NOT_HELD ? "taken by another replica; no longer leader"
                                           : "not renewed within the renew deadline; stepping "
                                             "down");
        }
        bool changed = role_update_locked(l, &role);
        pthread_mutex_unlock(&l->lock);
        if (changed)
            tell_role(l, role);
        if (acquired) {
            log_info("lease %s/%s acquired by %s (epoch %llu); re-listing before the first bind",
                     l->ns, l->name, l->identity, (unsigned long long)acquired);
            if (l->cfg.on_acquired)
                l->cfg.on_acquired(l->cfg.ctx, acquired);
        }
        /* The next round after a retry period, or just past the moment a
         * live holder's Lease expires when that comes sooner (failover
         * then costs lease duration + one retry period, not two). */
        int64_t next_ms = t0 / NS_PER_MS + l->cfg.retry_period_ms;
        if (a == ATTEMPT_NOT_HELD && l->expiry_ns > t0 && l->expiry_ns / NS_PER_MS + 1 < next_ms)
            next_ms = l->expiry_ns / NS_PER_MS + 1;
        struct timespec until = clock_timespec_ms(next_ms);
        pthread_mutex_lock(&l->lock);
        while (!l->stopping && pthread_cond_timedwait(&l->cond, &l->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------ */

struct leader *leader_new(const struct leader_config *cfg, struct kube_client *client, char *err,
                          size_t errlen)
{
    if (leader_config_check(cfg, err, errlen) < 0)
        return NULL;
    struct leader *l = calloc(1, sizeof(*l));
    char id[LEADER_IDENTITY_MAX];
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!cfg->identity && leader_default_identity(id, sizeof(id), err, errlen) < 0) {
        free(l);
        return NULL;
    }
    l->cfg = *cfg;
    l->ns = strdup(cfg->lease_namespace);
    l->name = strdup(cfg->lease_name);
    l->identity = strdup(cfg->identity ? cfg->identity : id);
    l->bind_url = strdup(cfg->bind_url ? cfg->bind_url : "");
    pthread_mutex_init(&l->lock, NULL);
    clock_cond_init(&l->cond);
    if (!l->ns || !l->name || !l->identity || !l->bind_url) {
        snprintf(err, errlen, "out of memory");
        leader_free(l);
        return NULL;
    }
    if (strlen(l->identity) >= LEADER_IDENTITY_MAX || strlen(l->bind_url) >= LEADER_URL_MAX) {
        snprintf(err, errlen, "leader identity or bind URL too long");
        leader_free(l);
        return NULL;
    }
    l->cfg.lease_namespace = l->ns;
    l->cfg.lease_name = l->name;
    l->cfg.identity = l->identity;
    l->cfg.bind_url = l->bind_url;
    l->client = client;
    int n = snprintf(l->collection, sizeof(l->collection),
                     "/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
    int m = snprintf(l->path, sizeof(l->path), "%.300s/%.250s", l->collection, l->name);
    if (n < 0 || (size_t)n >= sizeof(l->collection) || m < 0 || (size_t)m >= sizeof(l->path) ||
        strlen(l->name) > 250) {
        snprintf(err, errlen, "lease name %s/%s too long", l->ns, l->name);
        leader_free(l);
        return NULL;
    }
    l->role = LEADER_ROLE_CANDIDATE;
    return l;
}

int leader_start(struct leader *l, char *err, size_t errlen)
{
    log_info("leader election on lease %s/%s as %s (bind URL %s)", l->ns, l->name, l->identity,
             l->bind_url[0] ? l->bind_url : "none");
    int rc = pthread_create(&l->thread, NULL, leader_thread, l);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the leader thread: %s", strerror(rc));
        return -1;
    }
    l->started = true;
    return 0;
}

void leader_stop(struct leader *l)
{
    if (!l || !l->started)
        return;
    pthread_mutex_lock(&l->lock);
    l->stopping = true;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    pthread_join(l->thread, NULL);
    l->started = false;

    pthread_mutex_lock(&l->lock);
    bool held = l->holder;
    int64_t fence = l->fence_ns;
    l->holder = false; /* no new bind from here on (stopping refuses too) */
    l->synced = false;
    /* Binds in flight end by the fence (their API deadline); a successor
     * may bind as soon as the Lease is released, so they must end first. */
    struct timespec until = clock_timespec_ms(fence / NS_PER_MS + 1000);
    while (l->inflight > 0 && pthread_cond_timedwait(&l->cond, &l->lock, &until) != ETIMEDOUT)
        ;
    int inflight = l->inflight;
    pthread_mutex_unlock(&l->lock);
    if (!held || !l->record)
        return;
    if (inflight > 0) {
        /* Past the fence plus a second; the lease expires by itself. */
        log_warn("lease %s/%s: %d binds still in flight; not releasing", l->ns, l->name, inflight);
        return;
    }
    json_t *release = lease_claim(l, l->record, true);
    struct kube_error kerr = {0};
    if (!release || kube_put(l->client, l->path, release, NULL, &kerr) < 0)
        log_warn("lease %s/%s: release failed (%s); a successor waits for it to expire", l->ns,
                 l->name, release ? kerr.message : "out of memory");
    else
        log_info("lease %s/%s released by %s", l->ns, l->name, l->identity);
    json_decref(release);
}

void leader_free(struct leader *l)
{
    if (!l)
        return;
    leader_stop(l);
    json_decref(l->record);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l->bind_url);
    free(l);
}
