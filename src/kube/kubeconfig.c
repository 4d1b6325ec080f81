/* kubeconfig.c -- see kubeconfig.h. */
#include "kubeconfig.h"

#include "wire.h"
#include "yamlcfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SERVICEACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_PEM_FILE (1 << 20)
#define KUBECONFIG_MAX_FILES 32 /* entries of $KUBECONFIG read */

/* Walking state: the document and where messages point. */
struct walk {
    const char *path;
    struct ycfg_doc doc;
    char *err;
    size_t errlen;
};

static int fail_at(struct walk *w, const struct ycfg_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(struct walk *w, const struct ycfg_node *n, const char *fmt, ...)
{
    int prefix = snprintf(w->err, w->errlen, "%s:%d: ", w->path, n ? ycfg_line(n) : 1);
    if (prefix >= 0 && (size_t)prefix < w->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err + prefix, w->errlen - (size_t)prefix, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Value of `key` in a mapping (and the key node itself, for messages
 * about a nested block, which starts on the next line); NULL when absent or
 * when map is not one. */
static const struct ycfg_node *map_lookup(struct walk *w, const struct ycfg_node *map,
                                          const char *key, const struct ycfg_node **key_node)
{
    if (map == NULL || ycfg_kind(map) != YCFG_MAPPING)
        return NULL;
    for (size_t i = 0; i < ycfg_count(map); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(&w->doc, map, i, &k, &v);
        if (ycfg_kind(k) == YCFG_SCALAR && strcmp(ycfg_text(k), key) == 0) {
            if (key_node != NULL)
                *key_node = k;
            return v;
        }
    }
    return NULL;
}

static const struct ycfg_node *map_get(struct walk *w, const struct ycfg_node *map, const char *key)
{
    return map_lookup(w, map, key, NULL);
}

/* A string field: *out NULL when absent or null; an error when not a scalar. */
static int get_string(struct walk *w, const struct ycfg_node *map, const char *where,
                      const char *key, const char **out)
{
    *out = NULL;
    const struct ycfg_node *v = map_get(w, map, key);
    if (v == NULL || ycfg_kind(v) == YCFG_NULL)
        return 0;
    if (ycfg_kind(v) != YCFG_SCALAR)
        return fail_at(w, v, "%s.%s must be a string, not %s", where, key, ycfg_kind_name(v));
    *out = ycfg_text(v);
    return 0;
}

static int get_bool(struct walk *w, const struct ycfg_node *map, const char *where, const char *key,
                    bool *out)
{
    *out = false;
    const struct ycfg_node *v = map_get(w, map, key);
    if (v == NULL || ycfg_kind(v) == YCFG_NULL)
        return 0;
    const char *t = ycfg_text(v);
    if (ycfg_kind(v) == YCFG_SCALAR && !ycfg_quoted(v) && strcmp(t, "true") == 0)
        *out = true;
    else if (!(ycfg_kind(v) == YCFG_SCALAR && !ycfg_quoted(v) && strcmp(t, "false") == 0))
        return fail_at(w, v, "%s.%s must be true or false", where, key);
    return 0;
}

/* The merged files, in $KUBECONFIG order; empty files have no root. */
struct merged {
    struct walk *files;
    size_t n;
};

/* The `inner` mapping (cluster/user/context) of the entry named `name` in
 * the list `list_key` ("clusters"), e.g. clusters[name=c].cluster, from the
 * first file that has such an entry (kubectl's merge: the first file to
 * set a map key wins it whole). *in is that file. A missing entry is
 * reported at `ref` in `ref_w`. */
static int find_named(struct merged *m, const char *list_key, const char *inner, const char *name,
                      struct walk *ref_w, const struct ycfg_node *ref, struct walk **in,
                      const struct ycfg_node **out)
{
    for (size_t f = 0; f < m->n; f++) {
        struct walk *w = &m->files[f];
        const struct ycfg_node *list = map_get(w, ycfg_root(&w->doc), list_key);
        if (list != NULL && ycfg_kind(list) != YCFG_SEQUENCE && ycfg_kind(list) != YCFG_NULL)
            return fail_at(w, list, "%s must be a list, not %s", list_key, ycfg_kind_name(list));
        size_t n = list && ycfg_kind(list) == YCFG_SEQUENCE ? ycfg_count(list) : 0;
        for (size_t i = 0; i < n; i++) {
            const struct ycfg_node *entry = ycfg_item(&w->doc, list, i);
            const struct ycfg_node *nm = map_get(w, entry, "name");
            if (nm == NULL || ycfg_kind(nm) != YCFG_SCALAR || strcmp(ycfg_text(nm), name) != 0)
                continue;
            *in = w;
            const struct ycfg_node *body = map_get(w, entry, inner);
            if (body == NULL || ycfg_kind(body) == YCFG_NULL) {
                *out = NULL; /* an entry without settings: allowed (e.g. a user with no auth) */
                return 0;
            }
            if (ycfg_kind(body) != YCFG_MAPPING)
                return fail_at(w, body, "%s[name=%s].%s must be a mapping, not %s", list_key, name,
                               inner, ycfg_kind_name(body));
            *out = body;
            return 0;
        }
    }
    return fail_at(ref_w, ref, "%s \"%s\" not found in %s%s", inner, name, list_key,
                   m->n > 1 ? " of any file" : "");
}

/* `rel` relative to the kubeconfig's directory (absolute paths unchanged). */
static char *resolve_path(const char *config_path, const char *rel)
{
    if (rel[0] == '/')
        return strdup(rel);
    const char *slash = strrchr(config_path, '/');
    int dirlen = slash ? (int)(slash - config_path) : 1;
    const char *dir = slash ? config_path : ".";
    size_t need = (size_t)dirlen + strlen(rel) + 2;
    char *out = malloc(need);
    if (out != NULL)
        snprintf(out, need, "%.*s/%s", dirlen, dir, rel);
    return out;
}

/* Reads a whole small file into a NUL-terminated blob. */
static int read_file(const char *path, struct kube_blob *blob, char *why, size_t whylen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    struct stat st = {0};
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_PEM_FILE) {
        snprintf(why, whylen, "%s",
                 S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file of at most 1 MiB");
        fclose(f);
        return -1;
    }
    blob->data = malloc((size_t)st.st_size + 1);
    if (blob->data == NULL) {
        fclose(f);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    blob->len = fread(blob->data, 1, (size_t)st.st_size, f);
    blob->data[blob->len] = '\0';
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(blob->data);
        blob->data = NULL;
        snprintf(why, whylen, "read error");
        return -1;
    }
    return 0;
}

static bool looks_like_pem(const struct kube_blob *blob)
{
    return blob->data != NULL && strstr((const char *)blob->data, "-----BEGIN ") != NULL;
}

/* One PEM item: `file_key` (a path) or `data_key` (base64), not both. */
static int load_pem(struct walk *w, const struct ycfg_node *map, const char *where,
                    const char *file_key, const char *data_key, struct kube_blob *blob)
{
    const char *file, *data;
    if (get_string(w, map, where, file_key, &file) != 0 ||
        get_string(w, map, where, data_key, &data) != 0)
        return -1;
    if (file != NULL && file[0] == '\0')
        file = NULL;
    if (data != NULL && data[0] == '\0')
        data = NULL;
    if (file == NULL && data == NULL)
        return 0;
    if (file != NULL && data != NULL)
        return fail_at(w, map_get(w, map, data_key), "%s: set %s or %s, not both", where, file_key,
                       data_key);
    if (data != NULL) {
        const struct ycfg_node *n = map_get(w, map, data_key);
        if (kube_base64_decode(data, strlen(data), &blob->data, &blob->len) != 0)
            return fail_at(w, n, "%s.%s is not valid base64", where, data_key);
        if (!looks_like_pem(blob))
            return fail_at(w, n, "%s.%s does not decode to PEM (no -----BEGIN line)", where,
                           data_key);
        return 0;
    }
    const struct ycfg_node *n = map_get(w, map, file_key);
    char *abs = resolve_path(w->path, file);
    if (abs == NULL)
        return fail_at(w, n, "out of memory");
    char why[128];
    int rc = 0;
    if (read_file(abs, blob, why, sizeof why) != 0)
        rc = fail_at(w, n, "%s.%s %s: %s", where, file_key, abs, why);
    else if (!looks_like_pem(blob))
        rc = fail_at(w, n, "%s.%s %s: not a PEM file (no -----BEGIN line)", where, file_key, abs);
    free(abs);
    return rc;
}

static int load_cluster(struct walk *w, const struct ycfg_node *cluster, const char *name,
                        const struct ycfg_node *ref, struct kube_config *cfg)
{
    char where[160];
    snprintf(where, sizeof where, "clusters[name=%s].cluster", name);
    const char *server, *sni;
    if (get_string(w, cluster, where, "server", &server) != 0 ||
        get_string(w, cluster, where, "tls-server-name", &sni) != 0 ||
        get_bool(w, cluster, where, "insecure-skip-tls-verify", &cfg->insecure) != 0)
        return -1;
    if (server == NULL || server[0] == '\0')
        return fail_at(w, cluster ? cluster : ref, "%s.server is not set", where);
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
        return fail_at(w, map_get(w, cluster, "server"),
                       "%s.server \"%s\" must start with https:// or http://", where, server);
    cfg->server = strdup(server);
    if (cfg->server == NULL)
        return fail_at(w, ref, "out of memory");
    size_t len = strlen(cfg->server);
    while (len > 0 && cfg->server[len - 1] == '/')
        cfg->server[--len] = '\0';
    if (sni != NULL && sni[0] != '\0') /* libcurl 7.88 cannot override the verified name */
        return fail_at(w, map_get(w, cluster, "tls-server-name"),
                       "%s.tls-server-name is not supported", where);
    return load_pem(w, cluster, where, "certificate-authority", "certificate-authority-data",
                    &cfg->ca);
}

static const char EXEC_V1[] = "client.authentication.k8s.io/v1";
static const char EXEC_V1BETA1[] = "client.authentication.k8s.io/v1beta1";

/* A list of strings (args), each copied into out[]. */
static int get_string_list(struct walk *w, const struct ycfg_node *map, const char *where,
                           const char *key, char ***out, size_t *n)
{
    const struct ycfg_node *list = map_get(w, map, key);
    if (list == NULL || ycfg_kind(list) == YCFG_NULL)
        return 0;
    if (ycfg_kind(list) != YCFG_SEQUENCE)
        return fail_at(w, list, "%s.%s must be a list of strings, not %s", where, key,
                       ycfg_kind_name(list));
    size_t count = ycfg_count(list);
    *out = calloc(count + 1, sizeof **out);
    if (*out == NULL)
        return fail_at(w, list, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const struct ycfg_node *item = ycfg_item(&w->doc, list, i);
        if (ycfg_kind(item) != YCFG_SCALAR)
            return fail_at(w, item, "%s.%s[%zu] must be a string, not %s", where, key, i,
                           ycfg_kind_name(item));
        (*out)[i] = strdup(ycfg_text(item));
        if ((*out)[i] == NULL)
            return fail_at(w, item, "out of memory");
        *n = i + 1;
    }
    return 0;
}

/* exec.env: [{name, value}] into "NAME=value" strings. */
static int get_exec_env(struct walk *w, const struct ycfg_node *exec, const char *where,
                        struct kube_exec_config *x)
{
    const struct ycfg_node *list = map_get(w, exec, "env");
    if (list == NULL || ycfg_kind(list) == YCFG_NULL)
        return 0;
    if (ycfg_kind(list) != YCFG_SEQUENCE)
        return fail_at(w, list, "%s.env must be a list of {name, value}, not %s", where,
                       ycfg_kind_name(list));
    size_t count = ycfg_count(list);
    x->env = calloc(count + 1, sizeof *x->env);
    if (x->env == NULL)
        return fail_at(w, list, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const struct ycfg_node *item = ycfg_item(&w->doc, list, i);
        char at[256];
        snprintf(at, sizeof at, "%.200s.env[%zu]", where, i);
        if (ycfg_kind(item) != YCFG_MAPPING)
            return fail_at(w, item, "%s must be a mapping with name and value", at);
        const char *name, *value;
        if (get_string(w, item, at, "name", &name) != 0 ||
            get_string(w, item, at, "value", &value) != 0)
            return -1;
        if (name == NULL || name[0] == '\0' || strchr(name, '=') != NULL)
            return fail_at(w, item, "%s.name must be a variable name", at);
        size_t len = strlen(name) + (value ? strlen(value) : 0) + 2;
        x->env[i] = malloc(len);
        if (x->env[i] == NULL)
            return fail_at(w, item, "out of memory");
        snprintf(x->env[i], len, "%s=%s", name, value ? value : "");
        x->nenv = i + 1;
    }
    return 0;
}

/* users[].user.exec (client-go's ExecConfig). */
static int load_exec(struct walk *w, const struct ycfg_node *exec, const char *user_where,
                     struct kube_config *cfg)
{
    char where[200];
    snprintf(where, sizeof where, "%s.exec", user_where);
    if (ycfg_kind(exec) != YCFG_MAPPING)
        return fail_at(w, exec, "%s must be a mapping, not %s", where, ycfg_kind_name(exec));
    struct kube_exec_config *x = calloc(1, sizeof *x);
    if (x == NULL)
        return fail_at(w, exec, "out of memory");
    cfg->exec = x; /* freed by kube_config_free, even half filled */
    const char *command, *api_version, *mode, *hint;
    if (get_string(w, exec, where, "command", &command) != 0 ||
        get_string(w, exec, where, "apiVersion", &api_version) != 0 ||
        get_string(w, exec, where, "interactiveMode", &mode) != 0 ||
        get_string(w, exec, where, "installHint", &hint) != 0 ||
        get_bool(w, exec, where, "provideClusterInfo", &x->provide_cluster_info) != 0 ||
        get_string_list(w, exec, where, "args", &x->args, &x->nargs) != 0 ||
        get_exec_env(w, exec, where, x) != 0)
        return -1;
    if (command == NULL || command[0] == '\0')
        return fail_at(w, exec, "%s.command is not set", where);
    if (api_version == NULL || api_version[0] == '\0')
        return fail_at(w, exec, "%s.apiVersion is not set (%s or %s)", where, EXEC_V1,
                       EXEC_V1BETA1);
    if (strcmp(api_version, EXEC_V1) != 0 && strcmp(api_version, EXEC_V1BETA1) != 0)
        return fail_at(w, map_get(w, exec, "apiVersion"),
                       "%s.apiVersion \"%s\" is not supported (%s or %s; v1alpha1 was "
                       "removed in Kubernetes 1.24)",
                       where, api_version, EXEC_V1, EXEC_V1BETA1);
    bool v1 = strcmp(api_version, EXEC_V1) == 0;
    if (mode == NULL || mode[0] == '\0') {
        if (v1) /* required in v1, as kubectl requires it */
            return fail_at(w, exec,
                           "%s.interactiveMode is required with %s (Never, "
                           "IfAvailable or Always)",
                           where, EXEC_V1);
        x->interactive = KUBE_EXEC_IF_AVAILABLE;
    } else if (strcmp(mode, "Never") == 0) {
        x->interactive = KUBE_EXEC_NEVER;
    } else if (strcmp(mode, "IfAvailable") == 0) {
        x->interactive = KUBE_EXEC_IF_AVAILABLE;
    } else if (strcmp(mode, "Always") == 0) {
        x->interactive = KUBE_EXEC_ALWAYS;
    } else {
        return fail_at(w, map_get(w, exec, "interactiveMode"),
                       "%s.interactiveMode \"%s\" must be Never, IfAvailable or Always", where,
                       mode);
    }
    /* A relative command with a '/' is relative to this file, like the
     * other paths; a bare name is looked up in PATH when it runs. */
    x->command = strchr(command, '/') ? resolve_path(w->path, command) : strdup(command);
    x->api_version = strdup(api_version);
    x->install_hint = hint && hint[0] ? strdup(hint) : NULL;
    if (x->command == NULL || x->api_version == NULL || (hint && hint[0] && !x->install_hint))
        return fail_at(w, exec, "out of memory");
    return 0;
}

/* users[].user.auth-provider: the legacy in-tree plugins, removed from
 * kubectl in 1.26. oidc's id-token is a bearer token, used as it is (no
 * refresh); the others can only be replaced by their exec plugins. */
static int load_auth_provider(struct walk *w, const struct ycfg_node *provider,
                              const char *user_where, struct kube_config *cfg)
{
    char where[200];
    snprintf(where, sizeof where, "%s.auth-provider", user_where);
    if (ycfg_kind(provider) != YCFG_MAPPING)
        return fail_at(w, provider, "%s must be a mapping, not %s", where,
                       ycfg_kind_name(provider));
    const char *name, *id_token = NULL;
    if (get_string(w, provider, where, "name", &name) != 0)
        return -1;
    if (name == NULL)
        name = "";
    const struct ycfg_node *config = map_get(w, provider, "config");
    if (strcmp(name, "oidc") == 0 && config != NULL && ycfg_kind(config) == YCFG_MAPPING &&
        get_string(w, config, where, "id-token", &id_token) != 0)
        return -1;
    if (strcmp(name, "oidc") == 0 && id_token != NULL && id_token[0] != '\0') {
        cfg->token = strdup(id_token);
        return cfg->token ? 0 : fail_at(w, provider, "out of memory");
    }
    if (strcmp(name, "oidc") == 0)
        return fail_at(w, provider,
                       "%s oidc has no config.id-token: log in with an exec plugin instead "
                       "(kubelogin, `kubectl oidc-login`)",
                       where);
    if (strcmp(name, "gcp") == 0)
        return fail_at(w, provider,
                       "%s gcp was removed in Kubernetes 1.26: install gke-gcloud-auth-plugin "
                       "and run `gcloud container clusters get-credentials` to write an exec user",
                       where);
    if (strcmp(name, "azure") == 0)
        return fail_at(w, provider,
                       "%s azure was removed in Kubernetes 1.26: install kubelogin and run "
                       "`kubelogin convert-kubeconfig` to write an exec user",
                       where);
    return fail_at(w, provider, "%s \"%s\" is not supported: use an exec credential plugin", where,
                   name);
}

static int load_user(struct walk *w, const struct ycfg_node *user, const char *name,
                     struct kube_config *cfg)
{
    if (user == NULL)
        return 0;
    char where[160];
    snprintf(where, sizeof where, "users[name=%s].user", name);
    const struct ycfg_node *exec_key = NULL, *provider_key = NULL;
    const struct ycfg_node *exec = map_lookup(w, user, "exec", &exec_key);
    const struct ycfg_node *provider = map_lookup(w, user, "auth-provider", &provider_key);
    if (exec != NULL && ycfg_kind(exec) == YCFG_NULL)
        exec = NULL;
    if (provider != NULL && ycfg_kind(provider) == YCFG_NULL)
        provider = NULL;
    if (exec != NULL && provider != NULL)
        return fail_at(w, provider_key, "%s: set exec or auth-provider, not both", where);
    const char *token, *token_file, *username, *password;
    if (get_string(w, user, where, "token", &token) != 0 ||
        get_string(w, user, where, "tokenFile", &token_file) != 0 ||
        get_string(w, user, where, "username", &username) != 0 ||
        get_string(w, user, where, "password", &password) != 0)
        return -1;
    if (exec != NULL && ((token != NULL && token[0]) || (token_file != NULL && token_file[0])))
        return fail_at(w, exec_key, "%s: set exec or token/tokenFile, not both", where);
    if (exec != NULL && load_exec(w, exec, where, cfg) != 0)
        return -1;
    if (provider != NULL && load_auth_provider(w, provider, where, cfg) != 0)
        return -1;
    if (token != NULL && token[0] != '\0') {
        free(cfg->token); /* a bearer token given beside an oidc id-token wins, as in client-go */
        cfg->token = strdup(token);
    } else if (token_file != NULL && token_file[0] != '\0') {
        cfg->token_file = resolve_path(w->path, token_file);
        char why[256];
        char *probe =
            cfg->token_file ? kube_read_token_file(cfg->token_file, why, sizeof why) : NULL;
        if (probe == NULL)
            return fail_at(w, map_get(w, user, "tokenFile"), "%s.tokenFile: %s", where, why);
        free(probe);
    }
    if (username != NULL && username[0] != '\0') {
        cfg->username = strdup(username);
        cfg->password = strdup(password ? password : "");
    }
    if (load_pem(w, user, where, "client-certificate", "client-certificate-data", &cfg->cert) ||
        load_pem(w, user, where, "client-key", "client-key-data", &cfg->key))
        return -1;
    if ((cfg->cert.data == NULL) != (cfg->key.data == NULL))
        return fail_at(w, user, "%s: %s is set without %s", where,
                       cfg->cert.data ? "client-certificate" : "client-key",
                       cfg->cert.data ? "client-key" : "client-certificate");
    return 0;
}

/* The selected context of the merged files, its cluster and its user. */
static int load_merged(struct merged *m, const struct kube_config_select *sel,
                       struct kube_config *cfg)
{
    struct walk *first = &m->files[0];
    const char *context = sel->context;
    struct walk *ref_w = first;
    const struct ycfg_node *ref = ycfg_root(&first->doc);
    if (context == NULL || context[0] == '\0') { /* the first file that sets one */
        context = NULL;
        for (size_t f = 0; f < m->n && context == NULL; f++) {
            struct walk *w = &m->files[f];
            const char *cc;
            if (get_string(w, ycfg_root(&w->doc), "kubeconfig", "current-context", &cc) != 0)
                return -1;
            if (cc != NULL && cc[0] != '\0') {
                context = cc;
                ref_w = w;
                ref = map_get(w, ycfg_root(&w->doc), "current-context");
            }
        }
    }
    bool cluster_chosen = sel->cluster != NULL && sel->cluster[0] != '\0';
    if (context == NULL && !cluster_chosen)
        return fail_at(first, ref, "no current-context set and no context chosen (--context)");
    const struct ycfg_node *ctx = NULL, *cluster, *user = NULL;
    struct walk *ctx_w = ref_w, *cluster_w, *user_w;
    const char *cluster_name = NULL, *user_name = NULL, *ns = NULL;
    char where[160] = "the context";
    if (context != NULL) {
        if (find_named(m, "contexts", "context", context, ref_w, ref, &ctx_w, &ctx) != 0)
            return -1;
        snprintf(where, sizeof where, "contexts[name=%s].context", context);
        if (get_string(ctx_w, ctx, where, "cluster", &cluster_name) != 0 ||
            get_string(ctx_w, ctx, where, "user", &user_name) != 0 ||
            get_string(ctx_w, ctx, where, "namespace", &ns) != 0)
            return -1;
    }
    const struct ycfg_node *cluster_ref = map_get(ctx_w, ctx, "cluster");
    const struct ycfg_node *user_ref = map_get(ctx_w, ctx, "user");
    struct walk *cluster_ref_w = ctx_w, *user_ref_w = ctx_w;
    if (cluster_chosen) {
        cluster_name = sel->cluster;
        cluster_ref_w = first;
        cluster_ref = NULL; /* "--cluster", not a line of a file */
    }
    if (sel->user != NULL && sel->user[0] != '\0') {
        user_name = sel->user;
        user_ref_w = first;
        user_ref = NULL;
    }
    if (cluster_name == NULL || cluster_name[0] == '\0')
        return fail_at(ctx_w, ctx ? ctx : ref, "%s.cluster is not set", where);
    if (find_named(m, "clusters", "cluster", cluster_name, cluster_ref_w, cluster_ref, &cluster_w,
                   &cluster) != 0 ||
        load_cluster(cluster_w, cluster, cluster_name, cluster_ref, cfg) != 0)
        return -1;
    if (user_name != NULL && user_name[0] != '\0' &&
        (find_named(m, "users", "user", user_name, user_ref_w, user_ref, &user_w, &user) != 0 ||
         load_user(user_w, user, user_name, cfg) != 0))
        return -1;
    cfg->ns = strdup(ns && ns[0] ? ns : "default");
    const char *label = context ? context : "none";
    size_t olen = strlen(ctx_w->path) + strlen(label) + 32;
    cfg->origin = malloc(olen);
    if (cfg->origin != NULL)
        snprintf(cfg->origin, olen, "kubeconfig %s (context %s)", ctx_w->path, label);
    if (cfg->ns == NULL || cfg->origin == NULL)
        return fail_at(first, NULL, "out of memory");
    return 0;
}

/* The first root that is not a mapping is an error; empty files are
 * skipped when merging (kubectl reads them as empty configs). */
static int check_roots(struct merged *m, bool merging)
{
    size_t kept = 0;
    for (size_t f = 0; f < m->n; f++) {
        struct walk *w = &m->files[f];
        const struct ycfg_node *root = ycfg_root(&w->doc);
        if (root == NULL && !merging)
            return fail_at(w, NULL, "empty kubeconfig");
        if (root != NULL && ycfg_kind(root) != YCFG_MAPPING)
            return fail_at(w, root, "a kubeconfig must be a mapping, not %s", ycfg_kind_name(root));
        if (root == NULL) {
            ycfg_free(&w->doc);
            continue;
        }
        if (kept != f)
            m->files[kept] = *w;
        kept++;
    }
    m->n = kept;
    if (kept == 0)
        return fail_at(&m->files[0], NULL, "every kubeconfig file is empty");
    return 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int kube_config_load_files(const char *const *paths, size_t n, const struct kube_config_select *sel,
                           struct kube_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    if (n == 0 || n > KUBECONFIG_MAX_FILES) {
        snprintf(err, errlen, "%zu kubeconfig files (1 to %d)", n, KUBECONFIG_MAX_FILES);
        return -1;
    }
    struct walk files[KUBECONFIG_MAX_FILES];
    struct merged m = {.files = files};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (n > 1 && !file_exists(paths[i]))
            continue; /* kubectl skips the entries of $KUBECONFIG that do not exist */
        struct walk *w = &files[m.n];
        *w = (struct walk){.path = paths[i], .err = err, .errlen = errlen};
        rc = ycfg_load(paths[i], &w->doc, err, errlen);
        if (rc == 0)
            m.n++;
    }
    if (rc == 0 && m.n == 0) {
        snprintf(err, errlen, "none of the %zu kubeconfig files exists", n);
        rc = -1;
    }
    if (rc == 0)
        rc = check_roots(&m, n > 1);
    if (rc == 0)
        rc = load_merged(&m, sel, cfg);
    for (size_t i = 0; i < m.n; i++)
        ycfg_free(&files[i].doc);
    if (rc != 0)
        kube_config_free(cfg);
    return rc;
}

int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg, char *err,
                          size_t errlen)
{
    struct kube_config_select sel = {.context = context};
    return kube_config_load_files(&path, 1, &sel, cfg, err, errlen);
}

char *kube_read_token_file(const char *path, char *err, size_t errlen)
{
    struct kube_blob blob = {0};
    char why[128];
    if (read_file(path, &blob, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", path, why);
        return NULL;
    }
    char *s = (char *)blob.data;
    size_t len = blob.len;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        s[--len] = '\0';
    size_t skip = 0;
    while (skip < len && isspace((unsigned char)s[skip]))
        skip++;
    memmove(s, s + skip, len - skip + 1);
    if (s[0] == '\0') {
        snprintf(err, errlen, "%s: empty token file", path);
        free(s);
        return NULL;
    }
    return s;
}

/* "https://host:port", with brackets around an IPv6 host. */
static char *service_url(const char *host, const char *port)
{
    bool v6 = strchr(host, ':') != NULL && host[0] != '[';
    size_t need = strlen(host) + strlen(port) + 16;
    char *url = malloc(need);
    if (url != NULL)
        snprintf(url, need, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    return url;
}

int kube_config_in_cluster(const char *sa_dir, struct kube_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    if (sa_dir == NULL)
        sa_dir = SERVICEACCOUNT_DIR;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0') {
        snprintf(err, errlen,
                 "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                 "are not set (not running in a pod?)");
        return -1;
    }
    char path[4096], why[256];
    cfg->server = service_url(host, port);
    snprintf(path, sizeof path, "%s/token", sa_dir);
    cfg->token_file = strdup(path);
    char *probe = kube_read_token_file(path, why, sizeof why);
    if (probe == NULL) {
        snprintf(err, errlen, "in-cluster: service account token: %s", why);
        goto fail;
    }
    free(probe);
    snprintf(path, sizeof path, "%s/ca.crt", sa_dir);
    if (read_file(path, &cfg->ca, why, sizeof why) != 0) {
        snprintf(err, errlen, "in-cluster: CA certificate %s: %s", path, why);
        goto fail;
    }
    snprintf(path, sizeof path, "%s/namespace", sa_dir);
    cfg->ns = kube_read_token_file(path, why, sizeof why);
    if (cfg->ns == NULL)
        cfg->ns = strdup("default"); /* optional, as in client-go */
    cfg->origin = strdup("in-cluster");
    if (cfg->server == NULL || cfg->token_file == NULL || cfg->ns == NULL || cfg->origin == NULL) {
        snprintf(err, errlen, "in-cluster: out of memory");
        goto fail;
    }
    return 0;
fail:
    kube_config_free(cfg);
    return -1;
}

/* Splits a ':'-separated $KUBECONFIG into paths (pointers into buf),
 * dropping empty and repeated entries, as kubectl does. */
static size_t split_kubeconfig(char *buf, const char **paths, size_t max)
{
    size_t n = 0;
    for (char *p = buf; p != NULL && *p != '\0';) {
        char *colon = strchr(p, ':');
        if (colon != NULL)
            *colon = '\0';
        bool repeated = false;
        for (size_t i = 0; i < n; i++)
            repeated |= strcmp(paths[i], p) == 0;
        if (p[0] != '\0' && !repeated && n < max)
            paths[n++] = p;
        p = colon ? colon + 1 : NULL;
    }
    return n;
}

int kube_config_resolve(const struct kube_config_select *sel, struct kube_config *cfg, char *err,
                        size_t errlen)
{
    if (sel->in_cluster)
        return kube_config_in_cluster(sel->sa_dir, cfg, err, errlen);
    if (sel->kubeconfig != NULL && sel->kubeconfig[0] != '\0')
        return kube_config_load_files(&sel->kubeconfig, 1, sel, cfg, err, errlen);
    const char *env = getenv("KUBECONFIG");
    if (env != NULL && env[0] != '\0') {
        memset(cfg, 0, sizeof *cfg);
        char *list = strdup(env);
        if (list == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        const char *paths[KUBECONFIG_MAX_FILES];
        size_t n = split_kubeconfig(list, paths, KUBECONFIG_MAX_FILES);
        bool any = false;
        for (size_t i = 0; i < n; i++)
            any |= file_exists(paths[i]);
        int rc = -1;
        if (!any)
            snprintf(err, errlen, "KUBECONFIG=%s: no such file", env);
        else
            rc = kube_config_load_files(paths, n, sel, cfg, err, errlen);
        free(list);
        return rc;
    }
    char buf[4096];
    const char *home = getenv("HOME");
    if (home != NULL && home[0] != '\0') {
        snprintf(buf, sizeof buf, "%s/.kube/config", home);
        const char *one = buf;
        if (file_exists(buf))
            return kube_config_load_files(&one, 1, sel, cfg, err, errlen);
    }
    if (kube_config_in_cluster(sel->sa_dir, cfg, err, errlen) == 0)
        return 0;
    char inner[512];
    snprintf(inner, sizeof inner, "%s", err);
    snprintf(err, errlen, "no kubeconfig (KUBECONFIG unset, no ~/.kube/config) and %s", inner);
    return -1;
}

static void blob_free(struct kube_blob *blob)
{
    free(blob->data);
    blob->data = NULL;
    blob->len = 0;
}

static void kube_exec_config_free(struct kube_exec_config *x)
{
    if (x == NULL)
        return;
    for (size_t i = 0; i < x->nargs; i++)
        free(x->args[i]);
    for (size_t i = 0; i < x->nenv; i++)
        free(x->env[i]);
    free(x->args);
    free(x->env);
    free(x->command);
    free(x->api_version);
    free(x->install_hint);
    free(x);
}

void kube_config_free(struct kube_config *cfg)
{
    free(cfg->server);
    free(cfg->ns);
    free(cfg->origin);
    blob_free(&cfg->ca);
    blob_free(&cfg->cert);
    blob_free(&cfg->key);
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->username);
    free(cfg->password);
    kube_exec_config_free(cfg->exec);
    memset(cfg, 0, sizeof *cfg);
}
