/* dra_checkpoint.c -- the prepared-claims record on disk (see dra_checkpoint.h). */
#include "dra_checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "errmsg.h"
#include "file.h"
#include "log.h"

/* A checkpoint holds a few hundred claims at most; anything bigger is not ours. */
#define CHECKPOINT_MAX_BYTES (16u << 20)

const char *dra_claim_state_name(enum dra_claim_state s)
{
    return s == DRA_PREPARE_COMPLETED ? "PrepareCompleted" : "PrepareStarted";
}

static void entry_free(struct dra_claim_entry *e)
{
    free(e->devices);
    e->devices = NULL;
    e->device_count = 0;
}

void dra_checkpoint_free(struct dra_checkpoint *cp)
{
    for (size_t i = 0; i < cp->count; i++)
        entry_free(&cp->entries[i]);
    free(cp->entries);
    free(cp->path);
    *cp = (struct dra_checkpoint){0};
}

struct dra_claim_entry *dra_checkpoint_find(struct dra_checkpoint *cp, const char *uid)
{
    for (size_t i = 0; i < cp->count; i++)
        if (strcmp(cp->entries[i].uid, uid) == 0)
            return &cp->entries[i];
    return NULL;
}

int dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_claim_entry *e)
{
    struct dra_device *devices = NULL;
    if (e->device_count > 0) {
        devices = calloc(e->device_count, sizeof *devices);
        if (devices == NULL)
            return -1;
        memcpy(devices, e->devices, e->device_count * sizeof *devices);
    }
    struct dra_claim_entry *slot = dra_checkpoint_find(cp, e->uid);
    if (slot == NULL) {
        if (cp->count == cp->cap) {
            size_t cap = cp->cap ? cp->cap * 2 : 16;
            struct dra_claim_entry *grown = realloc(cp->entries, cap * sizeof *grown);
            if (grown == NULL) {
                free(devices);
                return -1;
            }
            cp->entries = grown;
            cp->cap = cap;
        }
        slot = &cp->entries[cp->count++];
    } else {
        entry_free(slot);
    }
    *slot = *e;
    slot->devices = devices;
    return 0;
}

bool dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid)
{
    struct dra_claim_entry *e = dra_checkpoint_find(cp, uid);
    if (e == NULL)
        return false;
    entry_free(e);
    size_t i = (size_t)(e - cp->entries);
    memmove(&cp->entries[i], &cp->entries[i + 1], (cp->count - i - 1) * sizeof *e);
    cp->count--;
    return true;
}

/* ---- reading ---------------------------------------------------------------- */

/* A string member into out (len bytes); "" when absent and optional. */
static int get_text(json_t *obj, const char *key, bool required, char *out, size_t len,
                    const char *where, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL && !required) {
        out[0] = '\0';
        return 0;
    }
    if (!json_is_string(v))
        return gp_errf(err, errlen, "%s: \"%s\" is missing or not a string", where, key);
    if (json_string_length(v) >= len)
        return gp_errf(err, errlen, "%s: \"%s\" is longer than %zu bytes", where, key, len - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_device(json_t *d, struct dra_device *out, const char *where, char *err,
                        size_t errlen)
{
    if (!json_is_object(d))
        return gp_errf(err, errlen, "%s: a device is not an object", where);
    json_t *limit = json_object_get(d, "limit");
    if (get_text(d, "request", false, out->request, sizeof out->request, where, err, errlen) ||
        get_text(d, "pool", true, out->pool, sizeof out->pool, where, err, errlen) ||
        get_text(d, "device", true, out->device, sizeof out->device, where, err, errlen) ||
        get_text(d, "shareID", false, out->share_id, sizeof out->share_id, where, err, errlen) ||
        get_text(d, "uuid", false, out->uuid, sizeof out->uuid, where, err, errlen) ||
        get_text(d, "cdiDeviceID", true, out->cdi_id, sizeof out->cdi_id, where, err, errlen))
        return -1;
    if (limit != NULL && (!json_is_integer(limit) || json_integer_value(limit) < 0))
        return gp_errf(err, errlen, "%s: \"limit\" is not a byte count", where);
    out->limit = limit ? (uint64_t)json_integer_value(limit) : 0;
    /* absent in checkpoints written before the cores capacity: no limit */
    json_t *cores = json_object_get(d, "cores");
    if (cores != NULL && (!json_is_integer(cores) || json_integer_value(cores) < 0 ||
                          json_integer_value(cores) > 99))
        return gp_errf(err, errlen, "%s: \"cores\" is not a percent 0..99", where);
    out->cores = cores ? (unsigned)json_integer_value(cores) : 0;
    return 0;
}

static int parse_claim(json_t *c, struct dra_claim_entry *e, char *err, size_t errlen)
{
    char where[96];
    if (!json_is_object(c))
        return gp_errf(err, errlen, "a claim is not an object");
    if (get_text(c, "uid", true, e->uid, sizeof e->uid, "claim", err, errlen) != 0)
        return -1;
    snprintf(where, sizeof where, "claim %s", e->uid);
    if (get_text(c, "namespace", true, e->ns, sizeof e->ns, where, err, errlen) ||
        get_text(c, "name", true, e->name, sizeof e->name, where, err, errlen))
        return -1;
    const char *state = json_string_value(json_object_get(c, "state"));
    if (state != NULL && strcmp(state, "PrepareStarted") == 0)
        e->state = DRA_PREPARE_STARTED;
    else if (state != NULL && strcmp(state, "PrepareCompleted") == 0)
        e->state = DRA_PREPARE_COMPLETED;
    else
        return gp_errf(err, errlen, "%s: \"state\" is not PrepareStarted or PrepareCompleted",
                       where);
    json_t *devices = json_object_get(c, "devices");
    if (!json_is_array(devices))
        return gp_errf(err, errlen, "%s: \"devices\" is missing or not a list", where);
    e->device_count = json_array_size(devices);
    if (e->device_count == 0)
        return 0;
    e->devices = calloc(e->device_count, sizeof *e->devices);
    if (e->devices == NULL)
        return gp_errf(err, errlen, "out of memory");
    for (size_t i = 0; i < e->device_count; i++)
        if (parse_device(json_array_get(devices, i), &e->devices[i], where, err, errlen) != 0)
            return -1;
    return 0;
}

static int parse_file(struct dra_checkpoint *cp, json_t *root, char *err, size_t errlen)
{
    const char *magic = json_string_value(json_object_get(root, "magic"));
    json_t *version = json_object_get(root, "version");
    if (magic == NULL || strcmp(magic, DRA_CHECKPOINT_MAGIC) != 0)
        return gp_errf(err, errlen, "not a gpupool DRA checkpoint (magic %s%s%s, want %s)",
                       magic ? "\"" : "", magic ? magic : "missing", magic ? "\"" : "",
                       DRA_CHECKPOINT_MAGIC);
    if (!json_is_integer(version) || json_integer_value(version) != DRA_CHECKPOINT_VERSION)
        return gp_errf(err, errlen,
                       "checkpoint version %lld is not %d (written by another "
                       "release of the plugin)",
                       json_is_integer(version) ? (long long)json_integer_value(version) : -1LL,
                       DRA_CHECKPOINT_VERSION);
    json_t *claims = json_object_get(root, "claims");
    if (!json_is_array(claims))
        return gp_errf(err, errlen, "\"claims\" is missing or not a list");
    for (size_t i = 0; i < json_array_size(claims); i++) {
        struct dra_claim_entry e = {0};
        if (parse_claim(json_array_get(claims, i), &e, err, errlen) != 0) {
            entry_free(&e);
            return -1;
        }
        if (dra_checkpoint_find(cp, e.uid) != NULL) {
            entry_free(&e);
            return gp_errf(err, errlen, "claim %s is listed twice", e.uid);
        }
        int rc = dra_checkpoint_put(cp, &e);
        entry_free(&e);
        if (rc != 0)
            return gp_errf(err, errlen, "out of memory");
    }
    return 0;
}

/* Keeps a refused file for people to look at: <path>.bad (an older one
 * is replaced; the newest refusal is the one worth reading). */
static void keep_aside(const char *path, char *err, size_t errlen)
{
    char bad[4200];
    size_t used = strlen(err);
    snprintf(bad, sizeof bad, "%s.bad", path);
    if (rename(path, bad) == 0)
        snprintf(err + used, errlen > used ? errlen - used : 0,
                 "; kept as %s, starting from an empty record", bad);
    else
        snprintf(err + used, errlen > used ? errlen - used : 0,
                 "; cannot keep it as %s (%s), starting from an empty record", bad,
                 strerror(errno));
}

int dra_checkpoint_load(struct dra_checkpoint *cp, const char *path, char *err, size_t errlen)
{
    *cp = (struct dra_checkpoint){0};
    cp->path = strdup(path);
    if (cp->path == NULL)
        return gp_errf(err, errlen, "out of memory");
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        return gp_errf(err, errlen, "cannot read the checkpoint %s: %s", path, strerror(errno));
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    long size = ftell(f);
    fclose(f);
    char why[GP_ERR_LEN] = "";
    int rc = 0;
    if (size > (long)CHECKPOINT_MAX_BYTES)
        rc = gp_errf(why, sizeof why, "larger than %u bytes", CHECKPOINT_MAX_BYTES);
    else if (root == NULL)
        rc = gp_errf(why, sizeof why, "not complete JSON (line %d: %s)", jerr.line, jerr.text);
    else if (!json_is_object(root))
        rc = gp_errf(why, sizeof why, "not a JSON object");
    else
        rc = parse_file(cp, root, why, sizeof why);
    json_decref(root);
    if (rc == 0)
        return 0;
    /* Whatever was read before the problem is dropped: a half-understood
     * record is worse than none (unprepare works without it). */
    for (size_t i = 0; i < cp->count; i++)
        entry_free(&cp->entries[i]);
    cp->count = 0;
    gp_errf(err, errlen, "checkpoint %s refused: %s", path, why);
    keep_aside(path, err, errlen);
    return -1;
}

/* ---- writing ---------------------------------------------------------------- */

static json_t *device_json(const struct dra_device *d)
{
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "pool", d->pool, "device", d->device, "uuid",
                          d->uuid, "cdiDeviceID", d->cdi_id, "limit", (json_int_t)d->limit);
    if (o != NULL && d->cores > 0 &&
        json_object_set_new(o, "cores", json_integer((json_int_t)d->cores)) != 0)
        goto fail;
    if (o != NULL && d->request[0] != '\0' &&
        json_object_set_new(o, "request", json_string(d->request)) != 0)
        goto fail;
    if (o != NULL && d->share_id[0] != '\0' &&
        json_object_set_new(o, "shareID", json_string(d->share_id)) != 0)
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

static json_t *checkpoint_json(const struct dra_checkpoint *cp)
{
    json_t *claims = json_array();
    json_t *root = claims ? json_pack("{s:s,s:i,s:o}", "magic", DRA_CHECKPOINT_MAGIC, "version",
                                      DRA_CHECKPOINT_VERSION, "claims", claims)
                          : NULL;
    if (root == NULL)
        return NULL;
    for (size_t i = 0; i < cp->count; i++) {
        const struct dra_claim_entry *e = &cp->entries[i];
        json_t *devices = json_array();
        json_t *c = devices ? json_pack("{s:s,s:s,s:s,s:s,s:o}", "uid", e->uid, "namespace", e->ns,
                                        "name", e->name, "state", dra_claim_state_name(e->state),
                                        "devices", devices)
                            : NULL;
        if (c == NULL || json_array_append_new(claims, c) != 0)
            goto fail;
        for (size_t k = 0; k < e->device_count; k++)
            if (json_array_append_new(devices, device_json(&e->devices[k])) != 0)
                goto fail;
    }
    return root;
fail:
    json_decref(root);
    return NULL;
}

int dra_checkpoint_save(const struct dra_checkpoint *cp, char *err, size_t errlen)
{
    json_t *root = checkpoint_json(cp);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (text == NULL)
        return gp_errf(err, errlen, "cannot write the checkpoint %s: out of memory", cp->path);
    int rc = file_replace(cp->path, text, strlen(text), 0600, FILE_REPLACE_SYNC);
    int saved = errno;
    free(text);
    if (rc != 0)
        return gp_errf(err, errlen, "cannot write the checkpoint %s: %s", cp->path,
                       strerror(saved));
    return 0;
}
