/* watch.c -- WATCH streams.
 *
 * A watch runs its own easy handle inside its own multi handle so that
 * curl_multi_poll() can be interrupted by curl_multi_wakeup() from
 * kube_cancel_fire() in another thread: cancellation is immediate instead of
 * waiting for the next byte or a progress tick. */
#include "client.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

/* Slack over the server-side timeoutSeconds before we call a silent
 * connection dead (the server ends a healthy watch at timeoutSeconds). */
#define WATCH_DEAD_SLACK_S 30
#define ERROR_BODY_MAX 65536

/* ---- one watch -------------------------------------------------------- */

struct watch {
    struct kube_client *c;
    CURL *h;
    const char *path;
    char *rv;
    kube_event_fn on_event;
    void *ctx;
    struct kube_error *err;
    struct kube_lines lines;
    long status;      /* HTTP status, read at the first body byte */
    char *error_body; /* body of a non-200 answer (a Status) */
    size_t error_len;
    bool stopped; /* we aborted the transfer; result and err are set */
    enum kube_result result;
    size_t events;
};

static bool parse_type(const char *type, enum kube_event_type *out)
{
    static const struct {
        const char *name;
        enum kube_event_type type;
    } types[] = {
        {"ADDED", KUBE_EVENT_ADDED},
        {"MODIFIED", KUBE_EVENT_MODIFIED},
        {"DELETED", KUBE_EVENT_DELETED},
        {"BOOKMARK", KUBE_EVENT_BOOKMARK},
    };
    for (size_t i = 0; type != NULL && i < sizeof types / sizeof types[0]; i++) {
        if (strcmp(type, types[i].name) == 0) {
            *out = types[i].type;
            return true;
        }
    }
    return false;
}

static int stop(struct watch *w, enum kube_result result)
{
    w->stopped = true;
    w->result = result;
    return -1;
}

/* One event line: {"type":"ADDED","object":{...}}. */
static int on_line(const char *line, size_t len, void *userdata)
{
    struct watch *w = userdata;
    json_error_t jerr;
    json_t *event = json_loadb(line, len, 0, &jerr);
    if (event == NULL) {
        kube_fail(w->err, 200, "BadResponse", "WATCH %s: malformed event (column %d): %s", w->path,
                  jerr.column, jerr.text);
        return stop(w, KUBE_ERROR);
    }
    const char *type = json_string_value(json_object_get(event, "type"));
    json_t *object = json_object_get(event, "object");
    enum kube_event_type kind;
    int rc = 0;
    if (!json_is_object(object)) {
        kube_fail(w->err, 200, "BadResponse", "WATCH %s: event without an object", w->path);
        rc = stop(w, KUBE_ERROR);
    } else if (type != NULL && strcmp(type, "ERROR") == 0) {
        int code = kube_error_from_status(w->err, object);
        rc = stop(w, code == 410 ? KUBE_GONE : KUBE_ERROR);
    } else if (!parse_type(type, &kind)) {
        kube_fail(w->err, 200, "BadResponse", "WATCH %s: unknown event type \"%s\"", w->path,
                  type ? type : "(none)");
        rc = stop(w, KUBE_ERROR);
    } else {
        const char *version = json_string_value(
            json_object_get(json_object_get(object, "metadata"), "resourceVersion"));
        if (version != NULL && strlen(version) < KUBE_RV_MAX)
            strcpy(w->rv, version);
        w->events++;
        if (w->on_event(kind, object, w->ctx) != 0) {
            kube_fail(w->err, 0, "CallbackError", "WATCH %s: the event callback stopped the watch",
                      w->path);
            rc = stop(w, KUBE_ERROR);
        }
    }
    json_decref(event);
    return rc;
}

static size_t on_watch_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct watch *w = userdata;
    size_t n = size * nmemb;
    if (w->status == 0)
        w->c->curl->easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->status);
    if (w->status != 200) { /* an error answer: keep the start of its Status */
        size_t room = ERROR_BODY_MAX - w->error_len;
        size_t take = n < room ? n : room;
        char *grown = realloc(w->error_body, w->error_len + take + 1);
        if (grown == NULL)
            return 0;
        w->error_body = grown;
        memcpy(w->error_body + w->error_len, ptr, take);
        w->error_len += take;
        return n;
    }
    bool too_large;
    if (kube_lines_feed(&w->lines, ptr, n, on_line, w, &too_large) != 0) {
        if (too_large) {
            kube_fail(w->err, 200, "TooLarge", "WATCH %s: event larger than %zu bytes", w->path,
                      w->c->max_body);
            stop(w, KUBE_ERROR);
        } else if (!w->stopped) {
            kube_fail(w->err, 0, "InternalError", "out of memory");
            stop(w, KUBE_ERROR);
        }
        return 0;
    }
    return n;
}

static char *watch_query(const struct kube_client *c, const char *rv)
{
    char *esc = rv[0] ? kube_escape(rv) : NULL;
    if (rv[0] && esc == NULL)
        return NULL;
    size_t need = 128 + (esc ? strlen(esc) : 0);
    char *q = malloc(need);
    if (q != NULL)
        snprintf(q, need, "watch=1&allowWatchBookmarks=true&timeoutSeconds=%ld%s%s",
                 c->watch_timeout_s, esc ? "&resourceVersion=" : "", esc ? esc : "");
    free(esc);
    return q;
}

/* Drives the transfer; returns the libcurl result, -1 when cancelled, -2
 * when `interrupt` fired (the caller ends the watch as a clean end). */
static int drive(const struct kube_curl *curl, CURLM *multi, CURL *h, struct kube_cancel *cancel,
                 struct kube_cancel *interrupt)
{
    int running = 1;
    while (running) {
        if (cancel != NULL && kube_cancel_fired(cancel))
            return -1;
        if (interrupt != NULL && kube_cancel_fired(interrupt))
            return -2;
        if (curl->multi_perform(multi, &running) != CURLM_OK)
            return CURLE_OUT_OF_MEMORY;
        if (running && curl->multi_poll(multi, NULL, 0, 1000, NULL) != CURLM_OK)
            return CURLE_OUT_OF_MEMORY;
    }
    int queued;
    CURLMsg *msg;
    while ((msg = curl->multi_info_read(multi, &queued)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
            return (int)msg->data.result;
    }
    return CURLE_OK;
}

/* Maps the finished transfer to a result, filling err. */
static enum kube_result finish(struct watch *w, int code, const char *curl_message,
                               struct kube_cancel *cancel)
{
    char what[512];
    snprintf(what, sizeof what, "WATCH %s", w->path);
    if (w->stopped)
        return w->result;
    if (code == -1) {
        kube_fail(w->err, 0, "Cancelled", "%s: cancelled", what);
        return KUBE_CANCELLED;
    }
    if (code == -2)
        return KUBE_OK; /* interrupted: the events so far are delivered, rv is theirs */
    if (code != CURLE_OK) {
        kube_error_from_curl(w->c->curl, w->err, (CURLcode)code, what, curl_message);
        return KUBE_ERROR;
    }
    if (w->status == 0)
        w->c->curl->easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->status);
    if (w->status != 200) {
        if (w->status == 401) /* a rotated token: the next attempt reads the new one */
            kube_token_refresh(w->c, true);
        kube_error_from_response(w->err, (int)w->status, what, w->error_body, w->error_len);
        return w->status == 410 ? KUBE_GONE : KUBE_ERROR;
    }
    if (kube_lines_pending(&w->lines) > 0) {
        kube_fail(w->err, 200, "BadResponse", "%s: the stream ended inside an event", what);
        return KUBE_ERROR;
    }
    return KUBE_OK;
}

enum kube_result kube_watch_counted(struct kube_client *c, const char *path, char *rv,
                                    kube_event_fn on_event, void *ctx, struct kube_cancel *cancel,
                                    struct kube_cancel *interrupt, struct kube_error *err,
                                    size_t *events)
{
    struct watch w = {.c = c, .path = path, .rv = rv, .on_event = on_event, .ctx = ctx, .err = err};
    const struct kube_curl *curl = c->curl;
    kube_lines_init(&w.lines, c->max_body);
    *events = 0;
    if (cancel != NULL && kube_cancel_fired(cancel)) {
        kube_fail(err, 0, "Cancelled", "WATCH %s: cancelled", path);
        return KUBE_CANCELLED;
    }
    char *query = watch_query(c, rv);
    char *url = query ? kube_url(c, path, query) : NULL;
    free(query);
    w.h = curl->easy_init();
    CURLM *multi = curl->multi_init();
    struct curl_slist *headers = NULL;
    enum kube_result result = KUBE_ERROR;
    char curl_message[CURL_ERROR_SIZE] = "";
    if (url == NULL || w.h == NULL || multi == NULL) {
        kube_fail(err, 0, "InternalError", "out of memory");
        goto out;
    }
    if (kube_handle_setup(c, w.h, url, NULL, &headers, err) != 0)
        goto out;
    curl->easy_setopt(w.h, CURLOPT_HTTPGET, 1L);
    curl->easy_setopt(w.h, CURLOPT_TIMEOUT_MS, (c->watch_timeout_s + WATCH_DEAD_SLACK_S) * 1000L);
    curl->easy_setopt(w.h, CURLOPT_WRITEFUNCTION, on_watch_body);
    curl->easy_setopt(w.h, CURLOPT_WRITEDATA, &w);
    curl->easy_setopt(w.h, CURLOPT_ERRORBUFFER, curl_message);
    curl->multi_add_handle(multi, w.h);
    struct cancel_reg reg = {.curl = curl, .multi = multi};
    struct cancel_reg interrupt_reg = {.curl = curl, .multi = multi};
    if (cancel != NULL)
        kube_cancel_attach(cancel, &reg);
    if (interrupt != NULL)
        kube_cancel_attach(interrupt, &interrupt_reg);
    int code = drive(curl, multi, w.h, cancel, interrupt);
    if (interrupt != NULL)
        kube_cancel_detach(interrupt, &interrupt_reg);
    if (cancel != NULL)
        kube_cancel_detach(cancel, &reg);
    curl->multi_remove_handle(multi, w.h);
    result = finish(&w, code, curl_message, cancel);
    kube_stats_count(c, false, w.lines.peak);
    *events = w.events;
out:
    curl->slist_free_all(headers);
    curl->multi_cleanup(multi);
    curl->easy_cleanup(w.h);
    kube_lines_free(&w.lines);
    free(w.error_body);
    free(url);
    return result;
}

enum kube_result kube_watch(struct kube_client *client, const char *path, char *rv,
                            kube_event_fn on_event, void *ctx, struct kube_cancel *cancel,
                            struct kube_error *err)
{
    size_t events;
    return kube_watch_counted(client, path, rv, on_event, ctx, cancel, NULL, err, &events);
}
