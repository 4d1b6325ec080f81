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

/* The `inner` mapping (cluster/user/context) of the entry named `name` in
 * the list `list_key` ("clusters"), e.g. clusters[name=c].cluster. */
static int find_named(struct walk *w, const struct ycfg_node *root, const char *list_key,
                      const char *inner, const char *name, const struct ycfg_node *ref,
                      const struct ycfg_node **out)
{
    const struct ycfg_node *list = map_get(w, root, list_key);
    if (list != NULL && ycfg_kind(list) != YCFG_SEQUENCE && ycfg_kind(list) != YCFG_NULL)
        return fail_at(w, list, "%s must be a list, not %s", list_key, ycfg_kind_name(list));
    size_t n = list && ycfg_kind(list) == YCFG_SEQUENCE ? ycfg_count(list) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct ycfg_node *entry = ycfg_item(&w->doc, list, i);
        const struct ycfg_node *nm = map_get(w, entry, "name");
        if (nm == NULL || ycfg_kind(nm) != YCFG_SCALAR || strcmp(ycfg_text(nm), name) != 0)
            continue;
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
    return fail_at(w, ref, "%s \"%s\" not found in %s", inner, name, list_key);
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

static int load_user(struct walk *w, const struct ycfg_node *user, const char *name,
                     struct kube_config *cfg)
{
    if (user == NULL)
        return 0;
    char where[160];
    snprintf(where, sizeof where, "users[name=%s].user", name);
    static const char *const unsupported[] = {"exec", "auth-provider"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        const struct ycfg_node *k = NULL;
        const struct ycfg_node *v = map_lookup(w, user, unsupported[i], &k);
        if (v != NULL && ycfg_kind(v) != YCFG_NULL)
            return fail_at(w, k,
                           "%s.%s: credential plugins are not supported; "
                           "use a token, tokenFile or client certificate",
                           where, unsupported[i]);
    }
    const char *token, *token_file, *username, *password;
    if (get_string(w, user, where, "token", &token) != 0 ||
        get_string(w, user, where, "tokenFile", &token_file) != 0 ||
        get_string(w, user, where, "username", &username) != 0 ||
        get_string(w, user, where, "password", &password) != 0)
        return -1;
    if (token != NULL && token[0] != '\0')
        cfg->token = strdup(token);
    else if (token_file != NULL && token_file[0] != '\0') {
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

static int load_document(struct walk *w, const char *context, struct kube_config *cfg)
{
    const struct ycfg_node *root = ycfg_root(&w->doc);
    if (root == NULL)
        return fail_at(w, NULL, "empty kubeconfig");
    if (ycfg_kind(root) != YCFG_MAPPING)
        return fail_at(w, root, "a kubeconfig must be a mapping, not %s", ycfg_kind_name(root));
    const struct ycfg_node *ref = root;
    if (context == NULL || context[0] == '\0') {
        if (get_string(w, root, "kubeconfig", "current-context", &context) != 0)
            return -1;
        if (context == NULL || context[0] == '\0')
            return fail_at(w, root, "no current-context set and no context chosen");
        ref = map_get(w, root, "current-context");
    }
    const struct ycfg_node *ctx, *cluster, *user = NULL;
    if (find_named(w, root, "contexts", "context", context, ref, &ctx) != 0)
        return -1;
    char where[160];
    snprintf(where, sizeof where, "contexts[name=%s].context", context);
    const char *cluster_name, *user_name, *ns;
    if (get_string(w, ctx, where, "cluster", &cluster_name) != 0 ||
        get_string(w, ctx, where, "user", &user_name) != 0 ||
        get_string(w, ctx, where, "namespace", &ns) != 0)
        return -1;
    if (cluster_name == NULL || cluster_name[0] == '\0')
        return fail_at(w, ctx ? ctx : ref, "%s.cluster is not set", where);
    const struct ycfg_node *cluster_ref = map_get(w, ctx, "cluster");
    if (find_named(w, root, "clusters", "cluster", cluster_name, cluster_ref, &cluster) != 0 ||
        load_cluster(w, cluster, cluster_name, cluster_ref, cfg) != 0)
        return -1;
    if (user_name != NULL && user_name[0] != '\0' &&
        (find_named(w, root, "users", "user", user_name, map_get(w, ctx, "user"), &user) != 0 ||
         load_user(w, user, user_name, cfg) != 0))
        return -1;
    cfg->ns = strdup(ns && ns[0] ? ns : "default");
    size_t olen = strlen(w->path) + strlen(context) + 32;
    cfg->origin = malloc(olen);
    if (cfg->origin != NULL)
        snprintf(cfg->origin, olen, "kubeconfig %s (context %s)", w->path, context);
    if (cfg->ns == NULL || cfg->origin == NULL)
        return fail_at(w, root, "out of memory");
    return 0;
}

int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg, char *err,
                          size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    struct walk w = {.path = path, .err = err, .errlen = errlen};
    if (ycfg_load(path, &w.doc, err, errlen) != 0)
        return -1;
    int rc = load_document(&w, context, cfg);
    ycfg_free(&w.doc);
    if (rc != 0)
        kube_config_free(cfg);
    return rc;
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

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* First existing entry of a ':'-separated $KUBECONFIG into buf. */
static int first_kubeconfig(const char *list, char *buf, size_t buflen)
{
    const char *p = list;
    while (*p != '\0') {
        size_t n = strcspn(p, ":");
        if (n > 0 && n < buflen) {
            snprintf(buf, buflen, "%.*s", (int)n, p);
            if (file_exists(buf))
                return 0;
        }
        p += n;
        if (*p == ':')
            p++;
    }
    return -1;
}

int kube_config_resolve(const char *path, const char *context, bool force_in_cluster,
                        const char *sa_dir, struct kube_config *cfg, char *err, size_t errlen)
{
    if (force_in_cluster)
        return kube_config_in_cluster(sa_dir, cfg, err, errlen);
    if (path != NULL && path[0] != '\0')
        return kube_config_load_file(path, context, cfg, err, errlen);
    char buf[4096];
    const char *env = getenv("KUBECONFIG");
    if (env != NULL && env[0] != '\0') {
        if (first_kubeconfig(env, buf, sizeof buf) != 0) {
            memset(cfg, 0, sizeof *cfg);
            snprintf(err, errlen, "KUBECONFIG=%s: no such file", env);
            return -1;
        }
        return kube_config_load_file(buf, context, cfg, err, errlen);
    }
    const char *home = getenv("HOME");
    if (home != NULL && home[0] != '\0') {
        snprintf(buf, sizeof buf, "%s/.kube/config", home);
        if (file_exists(buf))
            return kube_config_load_file(buf, context, cfg, err, errlen);
    }
    if (kube_config_in_cluster(sa_dir, cfg, err, errlen) == 0)
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
    memset(cfg, 0, sizeof *cfg);
}
