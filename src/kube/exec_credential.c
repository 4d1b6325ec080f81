/* exec_credential.c -- running ExecCredential plugins and caching their
 * answers (exec_credential.h, docs/cli.md). */
#include "exec_credential.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_PLUGIN_OUTPUT (1 << 20)
#define EXEC_INFO_VAR "KUBERNETES_EXEC_INFO"

/* ---- the answer ---- */

static int two_digits(const char *p)
{
    if (p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9')
        return -1;
    return (p[0] - '0') * 10 + (p[1] - '0');
}

int64_t kube_rfc3339_ms(const char *text)
{
    /* YYYY-MM-DDTHH:MM:SS, then optional .fraction, then Z or +HH:MM / -HH:MM */
    if (text == NULL || strlen(text) < 20)
        return -1;
    int century = two_digits(text), yy = two_digits(text + 2);
    int mon = two_digits(text + 5), day = two_digits(text + 8);
    int hour = two_digits(text + 11), min = two_digits(text + 14), sec = two_digits(text + 17);
    if (century < 0 || yy < 0 || mon < 1 || mon > 12 || day < 1 || day > 31 || hour < 0 ||
        hour > 23 || min < 0 || min > 59 || sec < 0 || sec > 60 || text[4] != '-' ||
        text[7] != '-' || (text[10] != 'T' && text[10] != 't' && text[10] != ' ') ||
        text[13] != ':' || text[16] != ':')
        return -1;
    const char *p = text + 19;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int64_t scale = 100;
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        for (; *p >= '0' && *p <= '9'; p++) {
            frac_ms += (*p - '0') * scale;
            scale /= 10;
        }
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh = two_digits(p + 1), om = p[3] == ':' ? two_digits(p + 4) : -1;
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -1;
        offset_s = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    struct tm tm = {.tm_year = century * 100 + yy - 1900,
                    .tm_mon = mon - 1,
                    .tm_mday = day,
                    .tm_hour = hour,
                    .tm_min = min,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    return ((int64_t)t - offset_s) * 1000 + frac_ms;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A PEM member of status: a string holding a -----BEGIN block. */
static int pem_member(const json_t *status, const char *key, const char *command,
                      struct kube_blob *blob, char *err, size_t errlen)
{
    const json_t *v = json_object_get(status, key);
    if (v == NULL || json_is_null(v))
        return 0;
    const char *text = json_string_value(v);
    if (text == NULL)
        return fail(err, errlen, "exec plugin %s: status.%s must be a string", command, key);
    if (strstr(text, "-----BEGIN ") == NULL)
        return fail(err, errlen, "exec plugin %s: status.%s is not PEM (no -----BEGIN line)",
                    command, key);
    blob->len = json_string_length(v);
    blob->data = malloc(blob->len + 1);
    if (blob->data == NULL)
        return fail(err, errlen, "out of memory");
    memcpy(blob->data, text, blob->len + 1);
    return 0;
}

int kube_exec_credential_parse(const char *text, size_t len, const char *api_version,
                               const char *command, struct kube_exec_credential *out, char *err,
                               size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (root == NULL)
        return fail(err, errlen,
                    "exec plugin %s: its output is not an ExecCredential: malformed JSON (line "
                    "%d column %d): %s",
                    command, jerr.line, jerr.column, jerr.text);
    int rc = -1;
    const char *version = json_string_value(json_object_get(root, "apiVersion"));
    const char *kind = json_string_value(json_object_get(root, "kind"));
    const json_t *status = json_object_get(root, "status");
    if (!json_is_object(root)) {
        fail(err, errlen, "exec plugin %s: its output is not a JSON object", command);
        goto out;
    }
    if (kind == NULL || strcmp(kind, "ExecCredential") != 0) {
        fail(err, errlen, "exec plugin %s: kind is \"%s\", not ExecCredential", command,
             kind ? kind : "");
        goto out;
    }
    if (version == NULL || strcmp(version, api_version) != 0) {
        fail(err, errlen, "exec plugin %s: apiVersion is \"%s\", the kubeconfig asked for %s",
             command, version ? version : "", api_version);
        goto out;
    }
    if (!json_is_object(status)) {
        fail(err, errlen, "exec plugin %s: the ExecCredential has no status", command);
        goto out;
    }
    const json_t *token = json_object_get(status, "token");
    if (token != NULL && !json_is_null(token) && !json_is_string(token)) {
        fail(err, errlen, "exec plugin %s: status.token must be a string", command);
        goto out;
    }
    if (json_string_length(token) > 0) {
        out->token = strdup(json_string_value(token));
        if (out->token == NULL) {
            fail(err, errlen, "out of memory");
            goto out;
        }
    }
    if (pem_member(status, "clientCertificateData", command, &out->cert, err, errlen) != 0 ||
        pem_member(status, "clientKeyData", command, &out->key, err, errlen) != 0)
        goto out;
    if ((out->cert.data == NULL) != (out->key.data == NULL)) {
        fail(err, errlen, "exec plugin %s: status.%s is set without %s", command,
             out->cert.data ? "clientCertificateData" : "clientKeyData",
             out->cert.data ? "clientKeyData" : "clientCertificateData");
        goto out;
    }
    if (out->token == NULL && out->cert.data == NULL) {
        fail(err, errlen,
             "exec plugin %s: status has neither token nor clientCertificateData/clientKeyData",
             command);
        goto out;
    }
    const json_t *expiry = json_object_get(status, "expirationTimestamp");
    if (expiry != NULL && !json_is_null(expiry)) {
        const char *when = json_string_value(expiry);
        out->expires_ms = when ? kube_rfc3339_ms(when) : -1;
        if (out->expires_ms <= 0) {
            fail(err, errlen, "exec plugin %s: status.expirationTimestamp \"%s\" is not RFC 3339",
                 command, when ? when : "(not a string)");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(root);
    if (rc != 0)
        kube_exec_credential_free(out);
    return rc;
}

bool kube_exec_credential_expired(const struct kube_exec_credential *cred, int64_t now_ms)
{
    return cred->expires_ms > 0 && now_ms >= cred->expires_ms;
}

void kube_exec_credential_free(struct kube_exec_credential *cred)
{
    free(cred->token);
    free(cred->cert.data);
    free(cred->key.data);
    memset(cred, 0, sizeof *cred);
}

static int blob_copy(struct kube_blob *to, const struct kube_blob *from)
{
    to->data = NULL;
    to->len = 0;
    if (from->data == NULL)
        return 0;
    to->data = malloc(from->len + 1);
    if (to->data == NULL)
        return -1;
    memcpy(to->data, from->data, from->len + 1);
    to->len = from->len;
    return 0;
}

static int credential_copy(struct kube_exec_credential *to, const struct kube_exec_credential *from)
{
    *to = (struct kube_exec_credential){.expires_ms = from->expires_ms,
                                        .generation = from->generation};
    to->token = from->token ? strdup(from->token) : NULL;
    if ((from->token && to->token == NULL) || blob_copy(&to->cert, &from->cert) != 0 ||
        blob_copy(&to->key, &from->key) != 0) {
        kube_exec_credential_free(to);
        return -1;
    }
    return 0;
}

/* ---- running the plugin ---- */

static char *base64_encode(const unsigned char *in, size_t len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/* "KUBERNETES_EXEC_INFO=<ExecCredential with spec>", malloc'ed. */
static char *exec_info(const struct kube_config *cfg, bool interactive)
{
    const struct kube_exec_config *x = cfg->exec;
    json_t *spec = json_pack("{s:b}", "interactive", interactive);
    if (spec != NULL && x->provide_cluster_info) {
        json_t *cluster = json_pack("{s:s, s:b}", "server", cfg->server, "insecure-skip-tls-verify",
                                    cfg->insecure);
        char *ca = cfg->ca.data ? base64_encode(cfg->ca.data, cfg->ca.len) : NULL;
        if (cluster != NULL && ca != NULL)
            json_object_set_new(cluster, "certificate-authority-data", json_string(ca));
        free(ca);
        if (cluster == NULL || json_object_set_new(spec, "cluster", cluster) != 0) {
            json_decref(spec);
            spec = NULL;
        }
    }
    json_t *info = spec ? json_pack("{s:s, s:s, s:o}", "apiVersion", x->api_version, "kind",
                                    "ExecCredential", "spec", spec)
                        : NULL;
    if (info == NULL)
        return NULL;
    size_t len = json_dumpb(info, NULL, 0, JSON_COMPACT);
    char *line = malloc(sizeof EXEC_INFO_VAR + 1 + len);
    if (line != NULL) {
        memcpy(line, EXEC_INFO_VAR "=", sizeof EXEC_INFO_VAR);
        json_dumpb(info, line + sizeof EXEC_INFO_VAR, len, JSON_COMPACT);
        line[sizeof EXEC_INFO_VAR + len] = '\0';
    }
    json_decref(info);
    return line;
}

static bool same_name(const char *a, const char *b)
{
    size_t la = strcspn(a, "="), lb = strcspn(b, "=");
    return la == lb && strncmp(a, b, la) == 0;
}

/* Our environment with the kubeconfig's variables and the exec info
 * replacing any of the same name: a NULL-terminated array of borrowed
 * strings (the array itself is the caller's to free). */
static char **plugin_environment(const struct kube_exec_config *x, char *info)
{
    size_t n = 0;
    while (environ != NULL && environ[n] != NULL)
        n++;
    char **envp = calloc(n + x->nenv + 2, sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool replaced = same_name(environ[i], info);
        for (size_t j = 0; j < x->nenv && !replaced; j++)
            replaced = same_name(environ[i], x->env[j]);
        if (!replaced)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < x->nenv; j++)
        envp[k++] = x->env[j];
    envp[k] = info;
    return envp;
}

/* Reads the child's stdout until EOF, the deadline or the size bound.
 * 0: complete; -1: err says why (the caller kills the child). */
static int read_output(int fd, int64_t deadline_ms, long timeout_ms, const char *command,
                       char **text, size_t *len, char *err, size_t errlen)
{
    size_t cap = 4096;
    *len = 0;
    *text = malloc(cap);
    if (*text == NULL)
        return fail(err, errlen, "out of memory");
    for (;;) {
        int64_t left = deadline_ms - clock_now_ms();
        if (left <= 0)
            return fail(err, errlen,
                        "exec plugin %s did not answer within %ld ms (killed); run it by hand to "
                        "see what it waits for",
                        command, timeout_ms);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            return fail(err, errlen, "exec plugin %s: poll: %s", command, strerror(errno));
        if (ready == 0)
            continue;
        if (*len + 1 >= cap) {
            if (cap >= MAX_PLUGIN_OUTPUT + 1)
                return fail(err, errlen, "exec plugin %s: output larger than %d bytes", command,
                            MAX_PLUGIN_OUTPUT);
            char *grown = realloc(*text, cap * 2);
            if (grown == NULL)
                return fail(err, errlen, "out of memory");
            *text = grown;
            cap *= 2;
        }
        ssize_t got = read(fd, *text + *len, cap - 1 - *len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return fail(err, errlen, "exec plugin %s: read: %s", command, strerror(errno));
        if (got == 0) {
            (*text)[*len] = '\0';
            return 0;
        }
        *len += (size_t)got;
    }
}

static int wait_child(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

/* One run of the plugin: its stdout parsed into *out. */
static int run_plugin(const struct kube_config *cfg, long timeout_ms,
                      struct kube_exec_credential *out, char *err, size_t errlen)
{
    const struct kube_exec_config *x = cfg->exec;
    bool tty = isatty(STDIN_FILENO) == 1;
    if (x->interactive == KUBE_EXEC_ALWAYS && !tty)
        return fail(err, errlen,
                    "exec plugin %s needs a terminal (interactiveMode: Always) and stdin is not "
                    "one",
                    x->command);
    bool interactive = x->interactive != KUBE_EXEC_NEVER && tty;
    char *info = exec_info(cfg, interactive);
    char **envp = info ? plugin_environment(x, info) : NULL;
    char **argv = calloc(x->nargs + 2, sizeof *argv);
    int pipefd[2] = {-1, -1};
    posix_spawn_file_actions_t actions;
    bool actions_ready = false;
    char *text = NULL;
    size_t len = 0;
    int rc = -1;
    if (envp == NULL || argv == NULL) {
        fail(err, errlen, "out of memory");
        goto out;
    }
    argv[0] = x->command;
    for (size_t i = 0; i < x->nargs; i++)
        argv[i + 1] = x->args[i];
    /* O_CLOEXEC: a plugin started by another thread must not inherit it
     * (it would hold our EOF back); dup2 onto fd 1 clears the flag there. */
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        fail(err, errlen, "exec plugin %s: pipe: %s", x->command, strerror(errno));
        goto out;
    }
    if (posix_spawn_file_actions_init(&actions) != 0) {
        fail(err, errlen, "out of memory");
        goto out;
    }
    actions_ready = true;
    if ((!interactive &&
         posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0) != 0) ||
        posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO) != 0) {
        fail(err, errlen, "out of memory");
        goto out;
    }
    pid_t pid;
    int spawned = posix_spawnp(&pid, x->command, &actions, NULL, argv, envp);
    close(pipefd[1]);
    pipefd[1] = -1;
    if (spawned != 0) {
        fail(err, errlen, "exec plugin %s: cannot run it: %s%s%s", x->command, strerror(spawned),
             x->install_hint ? "\n" : "", x->install_hint ? x->install_hint : "");
        goto out;
    }
    log_v(2, "ran exec credential plugin %s (pid %d)", x->command, (int)pid);
    int read_rc = read_output(pipefd[0], clock_now_ms() + timeout_ms, timeout_ms, x->command, &text,
                              &len, err, errlen);
    if (read_rc != 0)
        kill(pid, SIGKILL);
    int status = 0;
    if (wait_child(pid, &status) != 0) {
        fail(err, errlen, "exec plugin %s: waitpid: %s", x->command, strerror(errno));
        goto out;
    }
    if (read_rc != 0)
        goto out;
    if (WIFSIGNALED(status)) {
        fail(err, errlen, "exec plugin %s was killed by signal %d", x->command, WTERMSIG(status));
        goto out;
    }
    if (WEXITSTATUS(status) != 0) {
        fail(err, errlen, "exec plugin %s exited with status %d (its messages are above)",
             x->command, WEXITSTATUS(status));
        goto out;
    }
    rc = kube_exec_credential_parse(text, len, x->api_version, x->command, out, err, errlen);
out:
    if (actions_ready)
        posix_spawn_file_actions_destroy(&actions);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    free(text);
    free(argv);
    free(envp);
    free(info);
    return rc;
}

/* ---- the process-wide cache ---- */

struct cache_entry {
    char *key; /* cache_key(): NUL-separated parts */
    size_t key_len;
    struct kube_exec_credential cred; /* generation 0: none yet */
    /* A caller is running the plugin for this entry; the others wait on
     * `done` (CLOCK_MONOTONIC), each no longer than its own deadline. */
    bool running;
    pthread_cond_t done;
    struct cache_entry *next;
};

/* Process-wide on purpose (client-go keeps its exec authenticators the
 * same way): every client of one plugin configuration shares one answer.
 * cache_lock guards the list and the entries; it is never held while a
 * plugin runs, so a stalled plugin cannot hold up a caller past its
 * deadline (a Lease renew behind a bind's refresh: docs/ha.md). */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_entry *cache;
static uint64_t last_generation;

static void key_add(char **key, size_t *len, size_t *cap, const char *part)
{
    size_t n = strlen(part) + 1; /* parts are separated by their NULs */
    if (*key == NULL)
        return;
    if (*len + n > *cap) {
        size_t want = (*len + n) * 2;
        char *grown = realloc(*key, want);
        if (grown == NULL) {
            free(*key);
            *key = NULL;
            return;
        }
        *key = grown;
        *cap = want;
    }
    memcpy(*key + *len, part, n);
    *len += n;
}

static char *cache_key(const struct kube_config *cfg, size_t *len)
{
    const struct kube_exec_config *x = cfg->exec;
    size_t cap = 256;
    char *key = malloc(cap);
    *len = 0;
    key_add(&key, len, &cap, x->api_version);
    key_add(&key, len, &cap, cfg->server);
    key_add(&key, len, &cap, x->command);
    for (size_t i = 0; i < x->nargs; i++)
        key_add(&key, len, &cap, x->args[i]);
    key_add(&key, len, &cap, "\x1f"); /* args end here: ["a"] + env ["b"] != ["a","b"] */
    for (size_t i = 0; i < x->nenv; i++)
        key_add(&key, len, &cap, x->env[i]);
    return key;
}

/* The entry of `key`, created (without a credential) when new; takes key. */
static struct cache_entry *cache_find(char *key, size_t len)
{
    for (struct cache_entry *e = cache; e != NULL; e = e->next) {
        if (e->key_len == len && memcmp(e->key, key, len) == 0) {
            free(key);
            return e;
        }
    }
    struct cache_entry *e = calloc(1, sizeof *e);
    if (e == NULL) {
        free(key);
        return NULL;
    }
    e->key = key;
    e->key_len = len;
    clock_cond_init(&e->done);
    e->next = cache;
    cache = e;
    return e;
}

/* Waits (cache_lock held) for another caller's run of e's plugin to end;
 * -1 with err when deadline_ns (0: none) passes first. */
static int wait_for_run(struct cache_entry *e, const char *command, int64_t deadline_ns, char *err,
                        size_t errlen)
{
    if (deadline_ns <= 0) {
        pthread_cond_wait(&e->done, &cache_lock);
        return 0;
    }
    /* Rounded up: waking a millisecond early would only wait again. */
    struct timespec until = clock_timespec_ms((deadline_ns + 999999) / 1000000);
    int rc = pthread_cond_timedwait(&e->done, &cache_lock, &until);
    if (rc == ETIMEDOUT && clock_now_ns() >= deadline_ns)
        return fail(err, errlen,
                    "exec plugin %s: another request's run of it had not answered when this "
                    "request's deadline passed",
                    command);
    return 0;
}

int kube_exec_credential_get(const struct kube_config *cfg, long timeout_ms, uint64_t refused,
                             int64_t deadline_ns, struct kube_exec_credential *out, char *err,
                             size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len;
    char *key = cache_key(cfg, &len);
    if (key == NULL)
        return fail(err, errlen, "out of memory");
    pthread_mutex_lock(&cache_lock);
    struct cache_entry *e = cache_find(key, len);
    int rc = -1;
    if (e == NULL) {
        fail(err, errlen, "out of memory");
        goto out;
    }
    for (;;) {
        bool usable = e->cred.generation != 0 && e->cred.generation != refused &&
                      !kube_exec_credential_expired(&e->cred, clock_wall_ns() / 1000000);
        if (usable)
            break;
        if (!e->running) {
            /* Ours to run, for no longer than our deadline leaves: past
             * it the caller could not use the answer. */
            long run_ms = timeout_ms;
            if (deadline_ns > 0) {
                int64_t left_ms = (deadline_ns - clock_now_ns()) / 1000000;
                if (left_ms <= 0) {
                    fail(err, errlen, "exec plugin %s: the request's deadline passed before it ran",
                         cfg->exec->command);
                    goto out;
                }
                if (left_ms < run_ms)
                    run_ms = (long)left_ms;
            }
            e->running = true;
            pthread_mutex_unlock(&cache_lock);
            struct kube_exec_credential fresh;
            int ran = run_plugin(cfg, run_ms, &fresh, err, errlen);
            pthread_mutex_lock(&cache_lock);
            e->running = false;
            pthread_cond_broadcast(&e->done);
            if (ran != 0)
                goto out;
            kube_exec_credential_free(&e->cred);
            e->cred = fresh;
            e->cred.generation = ++last_generation;
            break;
        }
        if (wait_for_run(e, cfg->exec->command, deadline_ns, err, errlen) != 0)
            goto out;
        /* The run ended (or a spurious wake-up): look again. A run that
         * failed leaves nothing usable and the next caller tries anew. */
    }
    rc = credential_copy(out, &e->cred);
    if (rc != 0)
        fail(err, errlen, "out of memory");
out:
    pthread_mutex_unlock(&cache_lock);
    return rc;
}
