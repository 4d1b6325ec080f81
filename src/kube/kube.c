/* kube.c -- the client, its request/response calls and their retries.
 * See kube.h for the contract and docs/kube.md for the design. */
#include "buf.h"
#include "client.h"
#include "clock.h"
#include "log.h"
#include "wire.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef GP_VERSION
#define GP_VERSION "dev"
#endif

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_WATCH_TIMEOUT_S 300
#define DEFAULT_MAX_BODY ((size_t)64 << 20)
#define DEFAULT_ATTEMPTS 5
#define DEFAULT_INITIAL_BACKOFF_MS 200
#define DEFAULT_MAX_BACKOFF_MS 10000
#define TOKEN_REREAD_S 60
#define DEFAULT_EXEC_TIMEOUT_MS 60000

/* Has token_file changed since it was read? Records what it is now. */
static bool token_file_changed(struct kube_client *c)
{
    struct stat st;
    if (stat(c->cfg.token_file, &st) != 0)
        return false; /* mid-rotation or gone: keep the token we have */
    int64_t mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    bool changed = (uint64_t)st.st_dev != c->token_dev || (uint64_t)st.st_ino != c->token_ino ||
                   mtime_ns != c->token_mtime_ns || (int64_t)st.st_size != c->token_size;
    c->token_dev = (uint64_t)st.st_dev;
    c->token_ino = (uint64_t)st.st_ino;
    c->token_mtime_ns = mtime_ns;
    c->token_size = (int64_t)st.st_size;
    return changed;
}

void kube_token_refresh(struct kube_client *c, bool force)
{
    if (c->cfg.exec != NULL && force) {
        pthread_mutex_lock(&c->state_lock);
        c->exec_refused = true;
        pthread_mutex_unlock(&c->state_lock);
    }
    if (c->cfg.token_file == NULL)
        return;
    pthread_mutex_lock(&c->state_lock);
    bool changed = token_file_changed(c);
    if (force || changed || c->token == NULL ||
        clock_now_ms() - c->token_read_ms >= TOKEN_REREAD_S * 1000) {
        char why[256];
        char *fresh = kube_read_token_file(c->cfg.token_file, why, sizeof why);
        if (fresh != NULL) { /* else keep the old one: a rotation may be mid-write */
            free(c->token);
            c->token = fresh;
        }
        c->token_read_ms = clock_now_ms();
    }
    pthread_mutex_unlock(&c->state_lock);
}

void kube_stats_count(struct kube_client *c, bool retry, size_t body_bytes)
{
    pthread_mutex_lock(&c->state_lock);
    c->stats.requests++;
    if (retry)
        c->stats.retries++;
    if (body_bytes > c->stats.peak_body_bytes)
        c->stats.peak_body_bytes = body_bytes;
    pthread_mutex_unlock(&c->state_lock);
}

double kube_random01(struct kube_client *c)
{
    pthread_mutex_lock(&c->state_lock);
    uint64_t x = c->random_state; /* xorshift64: jitter needs no quality */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->random_state = x;
    pthread_mutex_unlock(&c->state_lock);
    return (double)(x >> 11) / (double)(1ULL << 53);
}

long kube_retry_delay_ms(struct kube_client *client, const struct kube_retry_policy *policy,
                         int retry, const struct kube_error *err)
{
    struct kube_retry_policy p = policy != NULL ? *policy : client->retry;
    if (p.initial_backoff_ms <= 0)
        p.initial_backoff_ms = client->retry.initial_backoff_ms;
    if (p.max_backoff_ms <= 0)
        p.max_backoff_ms = client->retry.max_backoff_ms;
    if (p.max_backoff_ms < p.initial_backoff_ms)
        p.max_backoff_ms = p.initial_backoff_ms;
    return kube_backoff_ms(&p, retry < 1 ? 1 : retry, kube_random01(client),
                           err != NULL ? err->retry_after_ms : 0);
}

void kube_client_stats(struct kube_client *client, struct kube_client_stats *out)
{
    pthread_mutex_lock(&client->state_lock);
    *out = client->stats;
    pthread_mutex_unlock(&client->state_lock);
}

const char *kube_client_namespace(const struct kube_client *client)
{
    return client->cfg.ns;
}

const char *kube_client_server(const struct kube_client *client)
{
    return client->cfg.server;
}

char *kube_escape(const char *value)
{
    /* May come before any client: loads libcurl itself. Without it there
     * can be no client to use the result with, and that client's creation
     * reports why. */
    const struct kube_curl *curl = kube_curl_get(NULL, 0);
    char *escaped = curl ? curl->easy_escape(NULL, value, 0) : NULL;
    if (escaped == NULL)
        return NULL;
    char *copy = strdup(escaped); /* callers free() it, not curl_free() */
    curl->free(escaped);
    return copy;
}

char *kube_url(const struct kube_client *c, const char *path, const char *extra)
{
    const char *sep = extra == NULL ? "" : strchr(path, '?') ? "&" : "?";
    size_t need = strlen(c->cfg.server) + strlen(path) + (extra ? strlen(extra) : 0) + 3;
    char *url = malloc(need);
    if (url != NULL)
        snprintf(url, need, "%s%s%s%s", c->cfg.server, path[0] == '/' ? "" : "/", path,
                 extra ? sep : "");
    if (url != NULL && extra != NULL)
        strcat(url, extra);
    return url;
}

static void set_blob(const struct kube_curl *curl, CURL *h, CURLoption option,
                     const struct kube_blob *blob)
{
    struct curl_blob b = {.data = blob->data, .len = blob->len, .flags = CURL_BLOB_NOCOPY};
    curl->easy_setopt(h, option, &b); /* NOCOPY: the config outlives every handle */
}

static int add_header(const struct kube_curl *curl, struct curl_slist **headers, const char *line,
                      struct kube_error *err)
{
    struct curl_slist *grown = curl->slist_append(*headers, line);
    if (grown == NULL)
        return kube_fail(err, 0, "InternalError", "out of memory");
    *headers = grown;
    return 0;
}

/* An exec user's credential, fresh: the client's copy unless it expired or
 * the server refused it, else the plugin's (cached process-wide), waited
 * for no longer than deadline_ns (0: none). The plugin runs without
 * state_lock held. */
static int exec_refresh(struct kube_client *c, int64_t deadline_ns, struct kube_error *err)
{
    pthread_mutex_lock(&c->state_lock);
    bool fresh = c->exec_cred.generation != 0 && !c->exec_refused &&
                 !kube_exec_credential_expired(&c->exec_cred, clock_wall_ns() / 1000000);
    uint64_t refused = c->exec_refused ? c->exec_cred.generation : 0;
    pthread_mutex_unlock(&c->state_lock);
    if (fresh)
        return 0;
    struct kube_exec_credential cred;
    char why[1024];
    if (kube_exec_credential_get(&c->cfg, c->exec_timeout_ms, refused, deadline_ns, &cred, why,
                                 sizeof why) != 0) {
        /* Nothing was sent: a caller (bind.c) may give its charge back. */
        if (deadline_ns > 0 && clock_now_ns() >= deadline_ns)
            return kube_fail(err, 0, "DeadlineExceeded",
                             "deadline passed while fetching credentials, nothing sent: %s", why);
        return kube_fail(err, 0, "AuthError", "%s", why);
    }
    pthread_mutex_lock(&c->state_lock);
    kube_exec_credential_free(&c->exec_cred);
    c->exec_cred = cred;
    c->exec_refused = false;
    pthread_mutex_unlock(&c->state_lock);
    return 0;
}

/* Every step that may wait for something outside this process (a token
 * file read, an exec plugin run): done before a request measures the time
 * it has left, so none of it is added to a deadline (docs/ha.md, the
 * fence). deadline_ns: 0 for none. */
static int credentials_refresh(struct kube_client *c, int64_t deadline_ns, struct kube_error *err)
{
    kube_token_refresh(c, false);
    if (c->cfg.exec != NULL && exec_refresh(c, deadline_ns, err) != 0)
        return -1;
    return 0;
}

/* The credentials as credentials_refresh left them, onto the handle and
 * the header list: memory only, no I/O. */
static int auth_header(struct kube_client *c, CURL *h, struct curl_slist **headers,
                       struct kube_error *err)
{
    pthread_mutex_lock(&c->state_lock);
    const char *token = c->cfg.exec != NULL ? c->exec_cred.token : c->token;
    char *line = NULL;
    if (token != NULL) {
        size_t need = strlen(token) + 32;
        line = malloc(need);
        if (line != NULL)
            snprintf(line, need, "Authorization: Bearer %s", token);
    }
    bool wanted = token != NULL;
    if (c->cfg.exec != NULL && c->exec_cred.cert.data != NULL) {
        /* Copied by libcurl: a later refresh frees these under us. */
        const struct kube_curl *curl = c->curl;
        struct curl_blob cert = {
            .data = c->exec_cred.cert.data, .len = c->exec_cred.cert.len, .flags = CURL_BLOB_COPY};
        struct curl_blob key = {
            .data = c->exec_cred.key.data, .len = c->exec_cred.key.len, .flags = CURL_BLOB_COPY};
        curl->easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
        curl->easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
        curl->easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl->easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    pthread_mutex_unlock(&c->state_lock);
    if (!wanted)
        return 0;
    if (line == NULL)
        return kube_fail(err, 0, "InternalError", "out of memory");
    int rc = add_header(c->curl, headers, line, err);
    free(line);
    return rc;
}

static int handle_setup(struct kube_client *c, CURL *h, const char *url, const char *accept,
                        const char *content_type, struct curl_slist **headers,
                        struct kube_error *err)
{
    const struct kube_curl *curl = c->curl;
    curl->easy_setopt(h, CURLOPT_URL, url);
    curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl->easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl->easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl->easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl->easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl->easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cfg.insecure) {
        curl->easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl->easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->cfg.ca.data != NULL)
        set_blob(curl, h, CURLOPT_CAINFO_BLOB, &c->cfg.ca);
    if (c->cfg.cert.data != NULL) {
        set_blob(curl, h, CURLOPT_SSLCERT_BLOB, &c->cfg.cert);
        set_blob(curl, h, CURLOPT_SSLKEY_BLOB, &c->cfg.key);
        curl->easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl->easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (c->cfg.username != NULL) {
        curl->easy_setopt(h, CURLOPT_USERNAME, c->cfg.username);
        curl->easy_setopt(h, CURLOPT_PASSWORD, c->cfg.password);
    }
    *headers = NULL;
    char accept_line[128];
    snprintf(accept_line, sizeof accept_line, "Accept: %s", accept ? accept : "application/json");
    if (add_header(c->curl, headers, accept_line, err) != 0 ||
        add_header(c->curl, headers, "Expect:", err) != 0 || auth_header(c, h, headers, err) != 0)
        goto fail;
    if (content_type != NULL) {
        char line[128];
        snprintf(line, sizeof line, "Content-Type: %s", content_type);
        if (add_header(c->curl, headers, line, err) != 0)
            goto fail;
    }
    curl->easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
    return 0;
fail:
    curl->slist_free_all(*headers);
    *headers = NULL;
    return -1;
}

int kube_handle_setup(struct kube_client *c, CURL *h, const char *url, const char *content_type,
                      struct curl_slist **headers, struct kube_error *err)
{
    *headers = NULL;
    if (credentials_refresh(c, 0, err) != 0)
        return -1;
    return handle_setup(c, h, url, NULL, content_type, headers, err);
}

void kube_error_from_curl(const struct kube_curl *curl, struct kube_error *err, CURLcode code,
                          const char *what, const char *curl_message)
{
    const char *reason;
    switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
        reason = "ConnectError";
        break;
    case CURLE_OPERATION_TIMEDOUT:
        reason = "Timeout";
        break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CLIENTCERT:
        reason = "TLSError";
        break;
    case CURLE_ABORTED_BY_CALLBACK:
        reason = "Cancelled";
        break;
    default:
        reason = "ConnectionError";
    }
    kube_fail(err, 0, reason, "%s: %s", what,
              curl_message && curl_message[0] ? curl_message : curl->easy_strerror(code));
}

/* ---- request/response ------------------------------------------------- */

/* Where a body goes, decided at its first byte. */
enum body_mode { BODY_UNDECIDED, BODY_BUFFERED, BODY_STREAMED };

struct response {
    struct buf body; /* first_cap 16 KiB: most answers fit the first allocation */
    size_t max;
    bool too_large;
    long status;
    long retry_after_ms;
    bool protobuf; /* the answer's Content-Type is Kubernetes' protobuf */
    struct kube_cancel *cancel;
    /* Streaming (call->stream): a 2xx protobuf answer goes to the stream. */
    const struct kube_stream *stream;
    const struct kube_curl *curl;
    CURL *handle;
    enum body_mode mode;
    bool stream_failed;     /* the stream refused a chunk; err says why */
    struct kube_error *err; /* the call's, for the stream's errors */
    int64_t deadline_ns;    /* the call's; 0: none */
    bool deadline_passed;   /* on_prereq found it passed: nothing was sent */
};

static enum body_mode body_mode(struct response *r)
{
    if (r->stream == NULL || !r->protobuf)
        return BODY_BUFFERED;
    long status = 0;
    r->curl->easy_getinfo(r->handle, CURLINFO_RESPONSE_CODE, &status);
    return status >= 200 && status < 300 ? BODY_STREAMED : BODY_BUFFERED;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct response *r = userdata;
    size_t n = size * nmemb;
    if (r->mode == BODY_UNDECIDED)
        r->mode = body_mode(r);
    if (r->mode == BODY_STREAMED) {
        if (r->stream->feed(r->stream->ctx, ptr, n, r->err) != 0) {
            r->stream_failed = true;
            return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
        }
        return n;
    }
    if (r->body.len + n > r->max) {
        r->too_large = true;
        return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
    }
    if (!buf_add(&r->body, ptr, n))
        return 0; /* out of memory: aborts the transfer */
    return n;
}

static size_t on_header(char *buffer, size_t size, size_t nitems, void *userdata)
{
    struct response *r = userdata;
    size_t n = size * nitems;
    static const char name[] = "retry-after:";
    if (n > sizeof name && strncasecmp(buffer, name, sizeof name - 1) == 0) {
        char value[32];
        size_t vlen = n - (sizeof name - 1);
        if (vlen >= sizeof value)
            vlen = sizeof value - 1;
        memcpy(value, buffer + sizeof name - 1, vlen);
        value[vlen] = '\0';
        value[strcspn(value, "\r\n")] = '\0';
        r->retry_after_ms = kube_retry_after_ms(value);
    }
    static const char type_name[] = "content-type:";
    static const char protobuf[] = "application/vnd.kubernetes.protobuf";
    if (n > sizeof type_name && strncasecmp(buffer, type_name, sizeof type_name - 1) == 0) {
        size_t at = sizeof type_name - 1;
        while (at < n && (buffer[at] == ' ' || buffer[at] == '\t'))
            at++;
        r->protobuf = n - at >= sizeof protobuf - 1 &&
                      strncasecmp(buffer + at, protobuf, sizeof protobuf - 1) == 0;
    }
    return n;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct response *r = userdata;
    return r->cancel != NULL && kube_cancel_fired(r->cancel); /* non-zero aborts */
}

/* libcurl calls this once the connection is ready (connected, TLS done, or
 * reused), just before it writes the request: the last moment a passed
 * deadline can still stop the request from leaving. Everything between the
 * deadline's first check in perform_once and here (libcurl's own set-up,
 * connection checks, a scheduling delay, a stopped process) is caught by
 * this second look; only the stretch from here to the send() is not. */
static int on_prereq(void *userdata, char *primary_ip, char *local_ip, int primary_port,
                     int local_port)
{
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    struct response *r = userdata;
    if (r->deadline_ns > 0 && clock_now_ns() >= r->deadline_ns) {
        r->deadline_passed = true;
        return CURL_PREREQFUNC_ABORT; /* CURLE_ABORTED_BY_CALLBACK, nothing sent */
    }
    return CURL_PREREQFUNC_OK;
}

/* Arms on_prereq for a call with a deadline. A libcurl older than 7.80 has
 * no CURLOPT_PREREQFUNCTION: the deadline is then only as good as the
 * relative timeout, which a pause before the send does not count (said
 * once, in the log). */
static void arm_prereq(const struct kube_curl *curl, CURL *h, struct response *r)
{
    static atomic_bool warned;
    if (curl->easy_setopt(h, CURLOPT_PREREQFUNCTION, on_prereq) == CURLE_OK &&
        curl->easy_setopt(h, CURLOPT_PREREQDATA, r) == CURLE_OK)
        return;
    if (!atomic_exchange(&warned, true))
        log_warn("libcurl has no CURLOPT_PREREQFUNCTION (older than 7.80): a request's "
                 "deadline is not re-checked as it leaves (docs/ha.md)");
}

/* One HTTP exchange on the shared handle. Returns the libcurl result; the
 * response (status, body) is in *r. Order (docs/ha.md, the fence): every
 * credential step first, then the handle and headers, then the time left
 * is measured, and on_prereq looks at the deadline once more as the
 * request leaves. */
static CURLcode perform_once(struct kube_client *c, const struct call *call, struct response *r,
                             char *curl_message, struct kube_error *err, bool *setup_failed)
{
    char *url = kube_url(c, call->path, NULL);
    if (url == NULL) {
        *setup_failed = true;
        kube_fail(err, 0, "InternalError", "out of memory");
        return CURLE_OUT_OF_MEMORY;
    }
    const struct kube_curl *curl = c->curl;
    struct curl_slist *headers = NULL;
    CURLcode code = CURLE_OK;
    /* Before the shared handle: a slow credential holds up no other call
     * of this client, and is waited for no longer than the deadline. */
    if (credentials_refresh(c, call->deadline_ns, err) != 0) {
        *setup_failed = true;
        free(url);
        return CURLE_LOGIN_DENIED;
    }
    pthread_mutex_lock(&c->request_lock);
    CURL *h = c->handle;
    r->handle = h;
    curl->easy_reset(h); /* keeps the connection cache: reuse survives */
    if (handle_setup(c, h, url, call->accept, call->content_type, &headers, err) != 0) {
        *setup_failed = true;
        code = CURLE_OUT_OF_MEMORY;
        goto out;
    }
    long timeout_ms = c->timeout_ms;
    if (call->deadline_ns > 0) {
        /* Measured after the wait for the shared connection and every
         * set-up step, which count against the caller's deadline too. */
        int64_t left_ms = (call->deadline_ns - clock_now_ns()) / 1000000;
        if (left_ms <= 0) {
            *setup_failed = true;
            kube_fail(err, 0, "DeadlineExceeded", "%s %s: deadline passed before it was sent",
                      call->method, call->path);
            code = CURLE_OPERATION_TIMEDOUT;
            goto out;
        }
        if (left_ms < timeout_ms)
            timeout_ms = (long)left_ms;
        r->deadline_ns = call->deadline_ns;
        arm_prereq(curl, h, r);
    }
    curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl->easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl->easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl->easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, curl_message);
    /* "": every encoding this libcurl decodes (gzip with Debian's); the
     * apiserver compresses answers over 128 KB, which cuts a big LIST's
     * bytes on the wire about thirtyfold. max_body applies to the
     * decoded bytes. */
    if (call->compressed && c->compress)
        curl->easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    if (call->cancel != NULL) {
        curl->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl->easy_setopt(h, CURLOPT_XFERINFODATA, r);
    }
    if (strcmp(call->method, "GET") == 0) {
        curl->easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        curl->easy_setopt(h, CURLOPT_POSTFIELDS, call->body);
        curl->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
        if (strcmp(call->method, "POST") != 0)
            curl->easy_setopt(h, CURLOPT_CUSTOMREQUEST, call->method);
    }
    code = curl->easy_perform(h);
    curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
out:
    pthread_mutex_unlock(&c->request_lock);
    curl->slist_free_all(headers);
    free(url);
    return code;
}

/* Parses a 2xx body into *out (a JSON object). */
static int parse_body(const struct call *call, const struct kube_body *r, json_t **out,
                      struct kube_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(r->data ? r->data : "", r->len, 0, &jerr);
    if (root == NULL)
        return kube_fail(err, (int)r->status, "BadResponse",
                         "%s %s: malformed JSON from the server (line %d column %d): %s",
                         call->method, call->path, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return kube_fail(err, (int)r->status, "BadResponse",
                         "%s %s: the server answered JSON that is not an object", call->method,
                         call->path);
    }
    if (out != NULL)
        *out = root;
    else
        json_decref(root);
    return 0;
}

/* An error answer to a protobuf request holds a protobuf Status: read
 * through its JSON form so that it reads like the JSON answer's. */
static void error_from_protobuf(struct kube_error *err, int http_status, const char *what,
                                const char *body, size_t len)
{
    json_t *status = kube_protobuf_status(body, len);
    if (status == NULL) {
        kube_error_from_response(err, http_status, what, body, len);
        return;
    }
    kube_error_from_status(err, status);
    err->http_status = http_status; /* authoritative, as for a JSON Status */
    json_decref(status);
}

static bool retryable(enum kube_retry_class cls, bool idempotent)
{
    return cls == KUBE_RETRY_ALWAYS || (cls == KUBE_RETRY_IDEMPOTENT && idempotent);
}

/* The end of a streamed answer: 0 when it finished cleanly, -1 (err
 * filled) for a failure that must not be retried, 1 for a broken transfer
 * that handed nothing on yet and may be retried like any other. */
static int stream_end(struct kube_client *c, const struct call *call, const struct response *r,
                      CURLcode code, const char *what, const char *curl_message,
                      struct kube_body *out, struct kube_error *err)
{
    const struct kube_stream *stream = call->stream;
    if (r->stream_failed) /* malformed, or the item callback stopped it */
        return -1;
    if (code == CURLE_OK) {
        if (stream->finish(stream->ctx, err) != 0)
            return -1;
        *out = (struct kube_body){.status = r->status, .streamed = true};
        return 0;
    }
    size_t delivered = stream->delivered(stream->ctx);
    if (delivered == 0 || code == CURLE_ABORTED_BY_CALLBACK)
        return 1; /* the usual handling: retried, or "Cancelled" */
    /* The caller has these items: a retry would hand them over again. */
    kube_fail(err, (int)r->status, "Interrupted", "%s broke off after %zu items: %s", what,
              delivered, curl_message[0] ? curl_message : c->curl->easy_strerror(code));
    return -1;
}

int kube_call(struct kube_client *c, const struct call *call, struct kube_body *out,
              struct kube_error *err)
{
    char what[512];
    snprintf(what, sizeof what, "%s %s", call->method, call->path);
    bool reread_token = false;
    const struct kube_stream *stream = call->stream;
    for (int attempt = 1;; attempt++) {
        struct response r = {.body = {.first_cap = 16384},
                             .max = c->max_body,
                             .cancel = call->cancel,
                             .stream = stream,
                             .curl = c->curl,
                             .err = err};
        char curl_message[CURL_ERROR_SIZE] = "";
        bool setup_failed = false;
        if (stream != NULL)
            stream->reset(stream->ctx);
        CURLcode code = perform_once(c, call, &r, curl_message, err, &setup_failed);
        if (r.mode == BODY_UNDECIDED && stream != NULL && r.protobuf && r.status >= 200 &&
            r.status < 300)
            r.mode = BODY_STREAMED; /* an empty answer: the stream says what it lacks */
        bool streamed = r.mode == BODY_STREAMED;
        kube_stats_count(c, attempt > 1, streamed ? stream->peak(stream->ctx) : r.body.cap);
        if (setup_failed) {
            free(r.body.data);
            return -1;
        }
        if (r.deadline_passed) { /* on_prereq stopped it: never sent, not retried */
            free(r.body.data);
            return kube_fail(err, 0, "DeadlineExceeded",
                             "%s: deadline passed before it was sent (checked as it was leaving)",
                             what);
        }
        if (streamed) {
            int rc = stream_end(c, call, &r, code, what, curl_message, out, err);
            if (rc <= 0)
                return rc; /* done, or a failure that must not be retried */
            /* else broken off before anything was handed on: retried below */
        }
        enum kube_retry_class cls;
        if (code == CURLE_OK && r.status >= 200 && r.status < 300) {
            out->data = r.body.data;
            out->len = r.body.len;
            out->status = r.status;
            return 0;
        }
        if (code == CURLE_WRITE_ERROR && r.too_large) {
            kube_fail(err, (int)r.status, "TooLarge", "%s: response larger than %zu bytes", what,
                      c->max_body);
            cls = KUBE_RETRY_NEVER;
        } else if (code != CURLE_OK) {
            kube_error_from_curl(c->curl, err, code, what, curl_message);
            cls = kube_retry_class_of(0, (int)code);
        } else if (r.protobuf) {
            error_from_protobuf(err, (int)r.status, what, r.body.data, r.body.len);
            cls = kube_retry_class_of((int)r.status, 0);
        } else {
            kube_error_from_response(err, (int)r.status, what, r.body.data, r.body.len);
            cls = kube_retry_class_of((int)r.status, 0);
        }
        free(r.body.data);
        err->retry_after_ms = r.retry_after_ms; /* for a caller's own retry (kube.h) */
        if (code == CURLE_ABORTED_BY_CALLBACK)
            return -1;
        /* A bound service-account token may have rotated under us, an
         * exec plugin's token may have been revoked before its expiry. */
        if (code == CURLE_OK && r.status == 401 && (c->cfg.token_file || c->cfg.exec) &&
            !reread_token) {
            reread_token = true;
            kube_token_refresh(c, true);
            cls = KUBE_RETRY_ALWAYS;
        }
        if (!retryable(cls, call->idempotent) || attempt >= c->retry.max_attempts)
            return -1;
        long wait = kube_backoff_ms(&c->retry, attempt, kube_random01(c), r.retry_after_ms);
        if (call->deadline_ns > 0 && clock_now_ns() + (int64_t)wait * 1000000 >= call->deadline_ns)
            return -1; /* no time left for another attempt: err has the last failure */
        if (kube_cancel_sleep(call->cancel, wait))
            return kube_fail(err, 0, "Cancelled", "%s: cancelled", what);
    }
}

/* kube_call, then the body parsed into *out (may be NULL): a JSON object. */
static int call_json(struct kube_client *c, const struct call *call, json_t **out,
                     struct kube_error *err)
{
    struct kube_body body = {0};
    if (kube_call(c, call, &body, err) != 0)
        return -1;
    int rc = parse_body(call, &body, out, err);
    free(body.data);
    return rc;
}

int kube_get(struct kube_client *client, const char *path, json_t **out, struct kube_error *err)
{
    return kube_get_until(client, path, 0, out, err);
}

int kube_get_until(struct kube_client *client, const char *path, int64_t deadline_ns, json_t **out,
                   struct kube_error *err)
{
    struct call call = {
        .method = "GET", .path = path, .idempotent = true, .deadline_ns = deadline_ns};
    if (out != NULL)
        *out = NULL;
    return call_json(client, &call, out, err);
}

static int call_with_body(struct kube_client *c, const char *method, const char *path,
                          const char *content_type, const json_t *body, bool idempotent,
                          int64_t deadline_ns, json_t **out, struct kube_error *err)
{
    if (out != NULL)
        *out = NULL;
    if (body == NULL)
        return kube_fail(err, 0, "InvalidArgument", "%s %s: no body", method, path);
    /* json_dumpb into our own buffer: json_dumps() memory belongs to
     * jansson's allocator, which a program may have replaced. */
    size_t len = json_dumpb(body, NULL, 0, JSON_COMPACT);
    char *text = len > 0 ? malloc(len) : NULL;
    if (text == NULL || json_dumpb(body, text, len, JSON_COMPACT) != len) {
        free(text);
        return kube_fail(err, 0, "InvalidArgument", "%s %s: body cannot be serialized", method,
                         path);
    }
    struct call call = {.method = method,
                        .path = path,
                        .content_type = content_type,
                        .body = text,
                        .body_len = len,
                        .idempotent = idempotent,
                        .deadline_ns = deadline_ns};
    int rc = call_json(c, &call, out, err);
    free(text);
    return rc;
}

int kube_patch(struct kube_client *client, const char *path, enum kube_patch_type type,
               const json_t *body, json_t **out, struct kube_error *err)
{
    static const char *const types[] = {
        [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [KUBE_PATCH_JSON] = "application/json-patch+json",
    };
    if ((unsigned)type > KUBE_PATCH_JSON)
        return kube_fail(err, 0, "InvalidArgument", "PATCH %s: unknown patch type %d", path,
                         (int)type);
    return call_with_body(client, "PATCH", path, types[type], body, false, 0, out, err);
}

int kube_post(struct kube_client *client, const char *path, const json_t *body, json_t **out,
              struct kube_error *err)
{
    return call_with_body(client, "POST", path, "application/json", body, false, 0, out, err);
}

int kube_put(struct kube_client *client, const char *path, const json_t *body, json_t **out,
             struct kube_error *err)
{
    return kube_put_until(client, path, body, 0, out, err);
}

int kube_put_until(struct kube_client *client, const char *path, const json_t *body,
                   int64_t deadline_ns, json_t **out, struct kube_error *err)
{
    return call_with_body(client, "PUT", path, "application/json", body, false, deadline_ns, out,
                          err);
}

int kube_delete(struct kube_client *client, const char *path, const char *uid,
                struct kube_error *err)
{
    /* Background: the server answers at once and the garbage collector
     * removes dependents, as `kubectl delete` does. */
    json_t *body = json_pack("{s:s, s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
                             "propagationPolicy", "Background");
    if (body != NULL && uid != NULL)
        json_object_set_new(body, "preconditions", json_pack("{s:s}", "uid", uid));
    if (body == NULL)
        return kube_fail(err, 0, "InvalidArgument", "DELETE %s: out of memory", path);
    /* Idempotent: a repeat of a DELETE the server did act on is answered
     * 404, which the caller reads as "gone" like the first answer. */
    int rc = call_with_body(client, "DELETE", path, "application/json", body, true, 0, NULL, err);
    json_decref(body);
    return rc;
}

bool kube_error_not_found(const struct kube_error *err)
{
    return err->http_status == 404;
}

int kube_bind_pod(struct kube_client *client, const char *ns, const char *name, const char *uid,
                  const char *node, const json_t *annotations, int64_t deadline_ns,
                  struct kube_error *err)
{
    json_t *meta = json_pack("{s:s, s:s}", "name", name, "namespace", ns);
    if (meta != NULL && uid != NULL)
        json_object_set_new(meta, "uid", json_string(uid));
    if (meta != NULL && annotations != NULL)
        json_object_set_new(meta, "annotations", json_deep_copy(annotations));
    json_t *body =
        json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "Binding",
                  "metadata", meta, "target", "apiVersion", "v1", "kind", "Node", "name", node);
    if (body == NULL)
        return kube_fail(err, 0, "InvalidArgument", "binding %s/%s to %s: bad names", ns, name,
                         node);
    char path[1024];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/binding", ns, name);
    int rc = call_with_body(client, "POST", path, "application/json", body, false, deadline_ns,
                            NULL, err);
    json_decref(body);
    return rc;
}

/* ---- construction ----------------------------------------------------- */

static void apply_defaults(struct kube_client *c, const struct kube_client_options *o)
{
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->connect_timeout_ms =
        o->connect_timeout_ms > 0 ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    c->watch_timeout_s = o->watch_timeout_s > 0 ? o->watch_timeout_s : DEFAULT_WATCH_TIMEOUT_S;
    c->exec_timeout_ms = o->exec_timeout_ms > 0 ? o->exec_timeout_ms : DEFAULT_EXEC_TIMEOUT_MS;
    c->max_body = o->max_body_bytes > 0 ? o->max_body_bytes : DEFAULT_MAX_BODY;
    c->retry.max_attempts = o->retry.max_attempts > 0 ? o->retry.max_attempts : DEFAULT_ATTEMPTS;
    c->retry.initial_backoff_ms =
        o->retry.initial_backoff_ms > 0 ? o->retry.initial_backoff_ms : DEFAULT_INITIAL_BACKOFF_MS;
    c->retry.max_backoff_ms =
        o->retry.max_backoff_ms > 0 ? o->retry.max_backoff_ms : DEFAULT_MAX_BACKOFF_MS;
    if (c->retry.max_backoff_ms < c->retry.initial_backoff_ms)
        c->retry.max_backoff_ms = c->retry.initial_backoff_ms;
}

/* An apiserver on this host: gzip would only cost both sides CPU (it
 * took a 5,000-node NodeList from 140 to 160 ms of apiserver time, and as
 * much again to inflate) to save bytes that never cross a wire. */
static bool server_is_loopback(const char *server)
{
    const char *host = strstr(server, "://");
    host = host ? host + 3 : server;
    return strncmp(host, "127.", 4) == 0 || strncmp(host, "[::1]", 5) == 0 ||
           (strncasecmp(host, "localhost", 9) == 0 &&
            (host[9] == ':' || host[9] == '\0' || host[9] == '/'));
}

struct kube_client *kube_client_new(const struct kube_client_options *opt, char *err, size_t errlen)
{
    static const struct kube_client_options none = {0};
    const struct kube_client_options *o = opt ? opt : &none;
    const struct kube_curl *curl = kube_curl_get(err, errlen);
    if (curl == NULL)
        return NULL;
    /* Reference-counted by libcurl (thread-safe since 7.84): each client
     * holds one reference, dropped by kube_client_free. */
    if (curl->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "libcurl initialisation failed");
        return NULL;
    }
    struct kube_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        curl->global_cleanup();
        return NULL;
    }
    c->curl = curl;
    struct kube_config_select sel = {.kubeconfig = o->kubeconfig,
                                     .context = o->context,
                                     .cluster = o->cluster,
                                     .user = o->user,
                                     .in_cluster = o->in_cluster,
                                     .sa_dir = o->serviceaccount_dir};
    if (kube_config_resolve(&sel, &c->cfg, err, errlen) != 0) {
        free(c);
        curl->global_cleanup();
        return NULL;
    }
    apply_defaults(c, o);
    c->compress = !server_is_loopback(c->cfg.server);
    c->user_agent = strdup(o->user_agent ? o->user_agent : "gpupool/" GP_VERSION);
    c->handle = curl->easy_init();
    if (c->cfg.token != NULL)
        c->token = strdup(c->cfg.token);
    pthread_mutex_init(&c->request_lock, NULL);
    pthread_mutex_init(&c->state_lock, NULL);
    c->random_state =
        (uint64_t)clock_wall_ns() ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)c;
    if (c->random_state == 0)
        c->random_state = 0x9e3779b97f4a7c15ULL;
    if (c->user_agent == NULL || c->handle == NULL || (c->cfg.token != NULL && c->token == NULL)) {
        snprintf(err, errlen, "out of memory");
        kube_client_free(c);
        return NULL;
    }
    kube_token_refresh(c, true);
    return c;
}

void kube_client_free(struct kube_client *client)
{
    if (client == NULL)
        return;
    const struct kube_curl *curl = client->curl;
    curl->easy_cleanup(client->handle);
    pthread_mutex_destroy(&client->request_lock);
    pthread_mutex_destroy(&client->state_lock);
    kube_config_free(&client->cfg);
    free(client->user_agent);
    free(client->token);
    kube_exec_credential_free(&client->exec_cred);
    free(client);
    curl->global_cleanup();
}

const char *kube_event_type_name(enum kube_event_type type)
{
    switch (type) {
    case KUBE_EVENT_ADDED:
        return "ADDED";
    case KUBE_EVENT_MODIFIED:
        return "MODIFIED";
    case KUBE_EVENT_DELETED:
        return "DELETED";
    case KUBE_EVENT_BOOKMARK:
        return "BOOKMARK";
    }
    return "UNKNOWN";
}
