/* cdi_spec.c -- CDI spec JSON from devices and edits (see cdi_spec.h). */
#include "cdi_spec.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "errmsg.h"
#include "file.h"
#include "log.h"

#define PATH_LEN 4096

/* Moves value into array; false (value released) on failure. */
static bool append(json_t *array, json_t *value)
{
    return value != NULL && json_array_append_new(array, value) == 0;
}

/* Sets key to a non-empty list; an empty one is left out (and released). */
static bool set_list(json_t *obj, const char *key, json_t *list)
{
    if (list == NULL)
        return false;
    if (json_array_size(list) == 0) {
        json_decref(list);
        return true;
    }
    return json_object_set_new(obj, key, list) == 0;
}

static json_t *env_list(const struct container_edits *e)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < e->n_env; i++) {
        struct buf kv = {.first_cap = 256};
        bool ok = buf_printf(&kv, "%s=%s", e->env[i].key, e->env[i].value) &&
                  append(list, json_string(kv.data));
        buf_free(&kv);
        if (!ok) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static json_t *device_node_list(const struct container_edits *e)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < e->n_device_nodes; i++) {
        const struct container_device_node *d = &e->device_nodes[i];
        json_t *node = json_pack("{s:s,s:s}", "path", d->path, "hostPath", d->host_path);
        if (node != NULL && d->permissions != NULL &&
            json_object_set_new(node, "permissions", json_string(d->permissions)) != 0) {
            json_decref(node);
            node = NULL;
        }
        if (!append(list, node)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static json_t *mount_list(const struct container_edits *e)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < e->n_mounts; i++) {
        const struct container_mount *m = &e->mounts[i];
        if (!append(list, json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", m->host_path,
                                    "containerPath", m->container_path, "options",
                                    m->read_only ? "ro" : "rw", "nosuid", "nodev", "bind"))) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static json_t *hook_list(const struct container_edits *e)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < e->n_hooks; i++) {
        const struct container_hook *h = &e->hooks[i];
        json_t *args = json_array();
        for (size_t k = 0; args != NULL && k < h->n_args; k++)
            if (!append(args, json_string(h->args[k]))) {
                json_decref(args);
                args = NULL;
            }
        if (args == NULL || !append(list, json_pack("{s:s,s:s,s:o}", "hookName", h->hook_name,
                                                    "path", h->path, "args", args))) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* CDI containerEdits: the non-empty lists of e. */
static json_t *edits_json(const struct container_edits *e)
{
    json_t *obj = json_object();
    if (obj == NULL)
        return NULL;
    if (e != NULL &&
        (!set_list(obj, "env", env_list(e)) || !set_list(obj, "deviceNodes", device_node_list(e)) ||
         !set_list(obj, "mounts", mount_list(e)) || !set_list(obj, "hooks", hook_list(e)))) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* "vendor/class": one slash, neither side empty. */
static bool valid_kind(const char *kind)
{
    const char *slash = kind != NULL ? strchr(kind, '/') : NULL;
    return slash != NULL && slash != kind && slash[1] != '\0' && strchr(slash + 1, '/') == NULL;
}

static json_t *spec_json(const struct cdi_spec *spec, char *err, size_t errlen)
{
    if (!valid_kind(spec->kind)) {
        gp_errf(err, errlen, "CDI kind \"%s\" is not vendor/class", spec->kind ? spec->kind : "");
        return NULL;
    }
    json_t *devices = json_array();
    json_t *common = edits_json(spec->common);
    json_t *root = NULL;
    if (devices == NULL || common == NULL)
        goto oom;
    for (size_t i = 0; i < spec->device_count; i++) {
        const struct cdi_spec_device *d = &spec->devices[i];
        if (d->name == NULL || d->name[0] == '\0') {
            gp_errf(err, errlen, "CDI device %zu of %s has no name", i, spec->kind);
            goto fail;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(spec->devices[k].name, d->name) == 0) {
                gp_errf(err, errlen, "CDI device %s=%s is listed twice", spec->kind, d->name);
                goto fail;
            }
        json_t *edits = edits_json(d->edits);
        if (edits == NULL ||
            !append(devices, json_pack("{s:s,s:o}", "name", d->name, "containerEdits", edits)))
            goto oom;
    }
    root = json_pack("{s:s,s:s,s:o}", "cdiVersion", CDI_SPEC_VERSION, "kind", spec->kind, "devices",
                     devices);
    devices = NULL; /* root's now, or released by json_pack's failure */
    if (root == NULL)
        goto oom;
    if (json_object_size(common) > 0) {
        if (json_object_set_new(root, "containerEdits", common) != 0) {
            common = NULL;
            goto oom;
        }
    } else {
        json_decref(common);
    }
    return root;
oom:
    gp_errf(err, errlen, "out of memory building the CDI spec of %s", spec->kind);
fail:
    json_decref(root);
    json_decref(devices);
    json_decref(common);
    return NULL;
}

char *cdi_spec_json(const struct cdi_spec *spec, char *err, size_t errlen)
{
    json_t *root = spec_json(spec, err, errlen);
    if (root == NULL)
        return NULL;
    char *json = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    struct buf text = {0};
    bool ok = json != NULL && buf_str(&text, json) && buf_str(&text, "\n");
    free(json);
    char *out = ok ? buf_take(&text, NULL) : NULL;
    if (out == NULL) {
        buf_free(&text);
        gp_errf(err, errlen, "out of memory writing the CDI spec of %s", spec->kind);
    }
    return out;
}

/* A plain file name: no directory part, so it stays inside dir. */
static bool plain_json_name(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    return n > strlen(".json") && strchr(name, '/') == NULL && strcmp(name, "..") != 0 &&
           strcmp(name + n - strlen(".json"), ".json") == 0;
}

int cdi_spec_write(const struct cdi_spec *spec, const char *dir, const char *file_name, char *err,
                   size_t errlen)
{
    if (!plain_json_name(file_name))
        return gp_errf(err, errlen, "CDI spec file name \"%s\" is not <name>.json",
                       file_name ? file_name : "");
    char path[PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s", dir, file_name) >= (int)sizeof path)
        return gp_errf(err, errlen, "CDI spec path too long under %s", dir);
    char *text = cdi_spec_json(spec, err, errlen);
    if (text == NULL)
        return -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int saved = errno;
        free(text);
        return gp_errf(err, errlen, "cannot create %s: %s", dir, strerror(saved));
    }
    int rc = file_replace(path, text, strlen(text), 0644, FILE_REPLACE_SYNC);
    int saved = errno;
    free(text);
    if (rc == FILE_REPLACE_NO_TEMP)
        return gp_errf(err, errlen, "cannot create a file in %s: %s", dir, strerror(saved));
    if (rc != 0)
        return gp_errf(err, errlen, "cannot write %s: %s", path, strerror(saved));
    log_info("Wrote CDI spec %s", path);
    return 0;
}

int cdi_spec_remove(const char *dir, const char *file_name, char *err, size_t errlen)
{
    if (!plain_json_name(file_name))
        return gp_errf(err, errlen, "CDI spec file name \"%s\" is not <name>.json",
                       file_name ? file_name : "");
    char path[PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s", dir, file_name) >= (int)sizeof path)
        return gp_errf(err, errlen, "CDI spec path too long under %s", dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return gp_errf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}
