/* dra_prepare.c -- the checkpointed prepare/unprepare state machine (see dra_prepare.h). */
#include "dra_prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dra_claim.h"
#include "errmsg.h"
#include "log.h"

/* mkdir -p: the state directory (under the kubelet's root by default). */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return gp_errf(err, errlen, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return gp_errf(err, errlen, "cannot create directory %s: %s", buf, strerror(errno));
        if (c == '\0')
            return 0;
        *p = c;
    }
}

/* Writes the record; a failure is remembered, and every later call
 * writes it again, so the file never keeps an entry whose files are gone
 * for longer than the disk refuses writes. */
static int save(struct dra_preparer *p, char *err, size_t errlen)
{
    p->dirty = dra_checkpoint_save(&p->cp, err, errlen) != 0;
    return p->dirty ? -1 : 0;
}

/* Drops uid's entry and writes the record; the edits are already gone. */
static void forget(struct dra_preparer *p, const char *uid)
{
    char err[GP_ERR_LEN];
    if (dra_checkpoint_remove(&p->cp, uid) && save(p, err, sizeof err) != 0)
        log_error("claim %s: %s (written again on the next call)", uid, err);
}

static void save_if_dirty(struct dra_preparer *p)
{
    char err[GP_ERR_LEN];
    if (p->dirty && save(p, err, sizeof err) != 0)
        log_error("%s", err);
}

/* A completed claim whose spec file is gone (removed by hand, a wiped
 * --cdi-root) is prepared again rather than answered with IDs the runtime
 * cannot resolve. */
static bool spec_present(const struct dra_preparer *p, const char *uid)
{
    char path[4200];
    struct stat st;
    return dra_edits_spec_path(&p->edits, uid, path, sizeof path) == 0 && stat(path, &st) == 0;
}

int dra_preparer_open(struct dra_preparer *p, const char *state_dir,
                      const struct dra_edits_options *edits, const struct dra_device_table *devices,
                      const char *pool, const struct dra_claim_source *source, char *err,
                      size_t errlen)
{
    *p = (struct dra_preparer){
        .edits = *edits, .devices = devices, .pool = pool, .source = *source, .lock_fd = -1};
    char path[4200];
    if (make_dirs(state_dir, err, errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/checkpoint.lock", state_dir);
    p->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (p->lock_fd < 0)
        return gp_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    if (flock(p->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int saved = errno;
        close(p->lock_fd);
        p->lock_fd = -1;
        if (saved == EWOULDBLOCK)
            return gp_errf(err, errlen,
                           "%s is locked: another gpupool-dra-plugin uses this --state-dir", path);
        return gp_errf(err, errlen, "cannot lock %s: %s", path, strerror(saved));
    }
    snprintf(path, sizeof path, "%s/%s", state_dir, DRA_CHECKPOINT_FILE);
    char why[GP_ERR_LEN * 2];
    if (dra_checkpoint_load(&p->cp, path, why, sizeof why) != 0) {
        if (p->cp.path == NULL) {
            dra_preparer_close(p);
            return gp_errf(err, errlen, "%s", why);
        }
        log_error("%s", why);
    }
    /* Interrupted prepares: their devices never reached the kubelet. */
    for (size_t i = 0; i < p->cp.count;) {
        struct dra_claim_entry *e = &p->cp.entries[i];
        if (e->state == DRA_PREPARE_COMPLETED) {
            i++;
            continue;
        }
        char uid[DRA_UID_LEN];
        snprintf(uid, sizeof uid, "%s", e->uid);
        if (dra_edits_remove(&p->edits, uid, why, sizeof why) != 0) {
            log_error("claim %s was being prepared when the plugin stopped; cannot roll it "
                      "back: %s (retried on unprepare)",
                      uid, why);
            i++;
            continue;
        }
        log_info("claim %s (%s/%s) was being prepared when the plugin stopped: rolled back", uid,
                 e->ns, e->name);
        forget(p, uid);
    }
    log_info("DRA checkpoint %s: %zu prepared claims", p->cp.path, p->cp.count);
    return 0;
}

void dra_preparer_close(struct dra_preparer *p)
{
    dra_checkpoint_free(&p->cp);
    if (p->lock_fd >= 0)
        close(p->lock_fd); /* and the lock with it */
    p->lock_fd = -1;
}

static int copy_id(char *out, size_t len, const char *value, const char *what, char *err,
                   size_t errlen)
{
    if (value == NULL || value[0] == '\0')
        return gp_errf(err, errlen, "the claim's %s is empty", what);
    if (strlen(value) >= len)
        return gp_errf(err, errlen, "the claim's %s is too long", what);
    memcpy(out, value, strlen(value) + 1);
    return 0;
}

int dra_prepare_claim(struct dra_preparer *p, const char *ns, const char *name, const char *uid,
                      const struct dra_claim_entry **out, char *err, size_t errlen)
{
    struct dra_claim_entry e = {0};
    if (copy_id(e.uid, sizeof e.uid, uid, "UID", err, errlen) ||
        copy_id(e.ns, sizeof e.ns, ns, "namespace", err, errlen) ||
        copy_id(e.name, sizeof e.name, name, "name", err, errlen))
        return -1;
    if (!dra_edits_uid_ok(uid))
        return gp_errf(err, errlen, "claim UID \"%.80s\" has characters other than [A-Za-z0-9-]",
                       uid);
    save_if_dirty(p);
    struct dra_claim_entry *known = dra_checkpoint_find(&p->cp, uid);
    if (known != NULL && known->state == DRA_PREPARE_COMPLETED && spec_present(p, uid)) {
        *out = known;
        return 0;
    }
    if (known != NULL) {
        /* a failed attempt whose rollback could not finish: finish it now */
        if (dra_edits_remove(&p->edits, uid, err, errlen) != 0)
            return -1;
        forget(p, uid);
    }

    json_t *claim = NULL;
    char why[GP_ERR_LEN];
    if (p->source.get(p->source.ctx, ns, name, &claim, why, sizeof why) != 0)
        return gp_errf(err, errlen, "cannot read ResourceClaim %s/%s: %s", ns, name, why);
    const struct dra_claim_scope scope = {p->edits.driver, p->pool, p->devices};
    int rc = dra_claim_resolve(claim, &scope, &e, err, errlen);
    json_decref(claim);
    if (rc != 0)
        return -1;

    /* PrepareStarted on disk before the first side effect. */
    if (dra_checkpoint_put(&p->cp, &e) != 0) {
        free(e.devices);
        return gp_errf(err, errlen, "out of memory");
    }
    free(e.devices);
    if (save(p, why, sizeof why) != 0) {
        (void)dra_checkpoint_remove(&p->cp, uid);
        return gp_errf(err, errlen, "%s", why);
    }
    struct dra_claim_entry *entry = dra_checkpoint_find(&p->cp, uid);
    if (dra_edits_apply(&p->edits, entry, p->devices, err, errlen) != 0)
        goto roll_back;
    entry->state = DRA_PREPARE_COMPLETED;
    if (save(p, why, sizeof why) != 0) {
        gp_errf(err, errlen, "%s", why);
        goto roll_back;
    }
    log_info("Prepared claim %s/%s (%s): %zu devices", ns, name, uid, entry->device_count);
    *out = entry;
    return 0;

roll_back:;
    char rb[GP_ERR_LEN];
    if (dra_edits_remove(&p->edits, uid, rb, sizeof rb) != 0) {
        /* the entry stays PrepareStarted: the next prepare or start finishes it */
        entry = dra_checkpoint_find(&p->cp, uid);
        if (entry != NULL)
            entry->state = DRA_PREPARE_STARTED;
        log_error("claim %s: cannot roll back: %s", uid, rb);
        return -1;
    }
    forget(p, uid);
    return -1;
}

int dra_unprepare_claim(struct dra_preparer *p, const char *uid, char *err, size_t errlen)
{
    if (uid == NULL || uid[0] == '\0')
        return gp_errf(err, errlen, "the claim's UID is empty");
    save_if_dirty(p);
    if (dra_edits_remove(&p->edits, uid, err, errlen) != 0)
        return -1;
    struct dra_claim_entry *e = dra_checkpoint_find(&p->cp, uid);
    if (e == NULL)
        return 0;
    char ns[DRA_NS_LEN], name[DRA_NAME_LEN];
    snprintf(ns, sizeof ns, "%s", e->ns);
    snprintf(name, sizeof name, "%s", e->name);
    (void)dra_checkpoint_remove(&p->cp, uid);
    if (save(p, err, errlen) != 0)
        return -1; /* the files are gone; the next call writes the record again */
    log_info("Unprepared claim %s/%s (%s)", ns, name, uid);
    return 0;
}
