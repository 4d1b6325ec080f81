/* list.c -- LIST: pages, the watch-cache read, and the item-by-item walk of
 * an answer. See kube.h (kube_list) and docs/kube.md.
 *
 * Why walk instead of json_loadb() on the whole page: a NodeList of 5,000
 * nodes is 12 MB of text and several times that as a jansson tree, all of
 * it malloc'ed and freed again for a handful of fields per node. Parsing
 * one item at a time keeps the heap small and hot (the same few blocks are
 * reused item after item), which made the walk of big lists about twice as
 * fast as the tree and bounded the memory. jansson still parses every
 * value (JSON_DISABLE_EOF_CHECK stops it after one and reports how far it
 * read); this file only steps over the punctuation between values. */
#include "client.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_PAGE_LIMIT 500
/* KUBE_LIST_PROTOBUF's Accept: protobuf first, JSON where there is none. */
#define PROTOBUF_OR_JSON "application/vnd.kubernetes.protobuf, application/json"

/* ---- walking one answer ----------------------------------------------- */

struct cursor {
    const char *text;
    size_t len, pos;
    const char *what;
    struct kube_error *err;
};

static void skip_space(struct cursor *c)
{
    while (c->pos < c->len && (c->text[c->pos] == ' ' || c->text[c->pos] == '\t' ||
                               c->text[c->pos] == '\n' || c->text[c->pos] == '\r'))
        c->pos++;
}

/* The next non-blank character, consumed when it is `want`. */
static bool take(struct cursor *c, char want)
{
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == want) {
        c->pos++;
        return true;
    }
    return false;
}

static enum kube_result malformed(struct cursor *c, const char *what_is_wrong)
{
    kube_fail(c->err, 200, "BadResponse", "LIST %s: malformed answer at byte %zu: %s", c->what,
              c->pos, what_is_wrong);
    return KUBE_ERROR;
}

/* Parses the one JSON value at the cursor (any type) and moves past it. */
static json_t *next_value(struct cursor *c)
{
    json_error_t jerr;
    json_t *v = json_loadb(c->text + c->pos, c->len - c->pos,
                           JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &jerr);
    if (v == NULL) {
        kube_fail(c->err, 200, "BadResponse", "LIST %s: malformed JSON at byte %zu: %s", c->what,
                  c->pos + (jerr.position > 0 ? (size_t)jerr.position : 0), jerr.text);
        return NULL;
    }
    c->pos += (size_t)jerr.position;
    return v;
}

static enum kube_result walk_items(struct cursor *c, kube_item_fn on_item, void *ctx)
{
    skip_space(c);
    if (c->len - c->pos >= 4 && memcmp(c->text + c->pos, "null", 4) == 0) {
        c->pos += 4;
        return KUBE_OK;
    }
    if (!take(c, '['))
        return malformed(c, "\"items\" is not a list");
    if (take(c, ']'))
        return KUBE_OK;
    do {
        json_t *item = next_value(c);
        if (item == NULL)
            return KUBE_ERROR;
        int stop = on_item(item, ctx);
        json_decref(item);
        if (stop != 0) {
            kube_fail(c->err, 0, "CallbackError", "LIST %s: the item callback stopped the list",
                      c->what);
            return KUBE_ERROR;
        }
    } while (take(c, ','));
    return take(c, ']') ? KUBE_OK : malformed(c, "expected ',' or ']' in \"items\"");
}

static enum kube_result oom(struct cursor *c)
{
    kube_fail(c->err, 0, "InternalError", "LIST %s: out of memory", c->what);
    return KUBE_ERROR;
}

static int copy_metadata(const json_t *meta, char *rv, char **next)
{
    const char *version = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *cont = json_string_value(json_object_get(meta, "continue"));
    if (rv != NULL && version != NULL)
        snprintf(rv, KUBE_RV_MAX, "%s", version);
    free(*next);
    *next = cont && cont[0] ? strdup(cont) : NULL;
    return cont && cont[0] && *next == NULL ? -1 : 0;
}

enum kube_result kube_list_walk(const char *body, size_t len, const char *what,
                                kube_item_fn on_item, void *ctx, char *rv, char **next,
                                struct kube_error *err)
{
    struct cursor c = {.text = body, .len = len, .what = what, .err = err};
    enum kube_result res = KUBE_OK;
    *next = NULL;
    if (!take(&c, '{'))
        return malformed(&c, "not a JSON object");
    if (take(&c, '}'))
        goto end;
    do {
        skip_space(&c);
        if (c.pos >= c.len || c.text[c.pos] != '"') {
            res = malformed(&c, "expected a member name");
            break;
        }
        json_t *key = next_value(&c);
        if (key == NULL) {
            res = KUBE_ERROR;
            break;
        }
        bool is_items = strcmp(json_string_value(key), "items") == 0;
        bool is_metadata = strcmp(json_string_value(key), "metadata") == 0;
        json_decref(key);
        if (!take(&c, ':')) {
            res = malformed(&c, "expected ':'");
            break;
        }
        if (is_items) {
            res = walk_items(&c, on_item, ctx);
            continue;
        }
        json_t *value = next_value(&c); /* kind, apiVersion, metadata */
        if (value == NULL) {
            res = KUBE_ERROR;
            break;
        }
        if (is_metadata && copy_metadata(value, rv, next) != 0)
            res = oom(&c);
        json_decref(value);
    } while (res == KUBE_OK && take(&c, ','));
    if (res == KUBE_OK && !take(&c, '}'))
        res = malformed(&c, "expected ',' or '}'");
end:
    skip_space(&c);
    if (res == KUBE_OK && c.pos != c.len)
        res = malformed(&c, "text after the object");
    if (res != KUBE_OK) {
        free(*next);
        *next = NULL;
    }
    return res;
}

/* ---- protobuf answers, decoded while they arrive ----------------------- */

/* A kube_stream (client.h) over the protobuf decoder: kube_call feeds it
 * a 2xx protobuf answer chunk by chunk; a JSON answer is buffered and
 * walked as above. */
struct protobuf_page {
    struct kube_pb_list *decoder;
    char *rv;   /* the caller's (may be NULL) */
    char *next; /* the page's continue token, malloc'ed */
};

static void page_reset(void *ctx)
{
    struct protobuf_page *page = ctx;
    kube_pb_list_reset(page->decoder);
    free(page->next);
    page->next = NULL;
}

static int page_feed(void *ctx, const char *data, size_t len, struct kube_error *err)
{
    struct protobuf_page *page = ctx;
    return kube_pb_list_feed(page->decoder, data, len, err);
}

static int page_finish(void *ctx, struct kube_error *err)
{
    struct protobuf_page *page = ctx;
    return kube_pb_list_finish(page->decoder, page->rv, &page->next, err) == KUBE_OK ? 0 : -1;
}

static size_t page_delivered(const void *ctx)
{
    const struct protobuf_page *page = ctx;
    return kube_pb_list_items(page->decoder);
}

static size_t page_peak(const void *ctx)
{
    const struct protobuf_page *page = ctx;
    return kube_pb_list_peak(page->decoder);
}

/* ---- pages ------------------------------------------------------------ */

/* path + "limit=N", and "resourceVersion=0" on the first page of an
 * any-version list or "continue=<token>" on the next ones (the apiserver
 * refuses a resourceVersion beside a continue token). */
static char *page_path(const char *path, long limit, unsigned flags, const char *cont)
{
    char *esc = cont ? kube_escape(cont) : NULL;
    if (cont != NULL && esc == NULL)
        return NULL;
    const char *version =
        cont == NULL && (flags & KUBE_LIST_ANY_VERSION) ? "&resourceVersion=0" : "";
    size_t need = strlen(path) + 96 + (esc ? strlen(esc) : 0);
    char *full = malloc(need);
    if (full != NULL)
        snprintf(full, need, "%s%climit=%ld%s%s%s", path, strchr(path, '?') ? '&' : '?', limit,
                 version, esc ? "&continue=" : "", esc ? esc : "");
    free(esc);
    return full;
}

/* One page: kube_call, then the walk of a buffered (JSON) answer; a
 * protobuf answer was decoded by `stream` while it arrived. */
static enum kube_result list_page(struct kube_client *client, const char *path,
                                  const struct call *call, kube_item_fn on_item, void *ctx,
                                  char *rv, struct protobuf_page *page, char **cont,
                                  struct kube_error *err)
{
    struct kube_body body = {0};
    if (kube_call(client, call, &body, err) != 0) {
        if (call->cancel != NULL && kube_cancel_fired(call->cancel))
            return KUBE_CANCELLED;
        return err->http_status == 410 ? KUBE_GONE : KUBE_ERROR;
    }
    if (body.streamed) {
        *cont = page->next;
        page->next = NULL;
        return KUBE_OK;
    }
    /* The server answers JSON where it has no protobuf (CRDs, aggregated
     * APIs): walked as without the flag. */
    enum kube_result res =
        kube_list_walk(body.data ? body.data : "", body.len, path, on_item, ctx, rv, cont, err);
    free(body.data); /* one page at a time */
    return res;
}

enum kube_result kube_list_cancellable(struct kube_client *client, const char *path, long limit,
                                       unsigned flags, kube_item_fn on_item, void *ctx, char *rv,
                                       struct kube_cancel *cancel, struct kube_error *err)
{
    if (limit <= 0)
        limit = DEFAULT_PAGE_LIMIT;
    if (rv != NULL)
        rv[0] = '\0';
    struct protobuf_page page = {.rv = rv};
    struct kube_stream stream = {.reset = page_reset,
                                 .feed = page_feed,
                                 .finish = page_finish,
                                 .delivered = page_delivered,
                                 .peak = page_peak,
                                 .ctx = &page};
    if (flags & KUBE_LIST_PROTOBUF) {
        page.decoder = kube_pb_list_new(path, on_item, ctx, client->max_body);
        if (page.decoder == NULL) {
            kube_fail(err, 0, "InternalError", "out of memory");
            return KUBE_ERROR;
        }
    }
    enum kube_result res = KUBE_OK;
    char *cont = NULL;
    do {
        if (cancel != NULL && kube_cancel_fired(cancel)) {
            kube_fail(err, 0, "Cancelled", "LIST %s: cancelled", path);
            res = KUBE_CANCELLED;
            break;
        }
        char *page_url = page_path(path, limit, flags, cont);
        free(cont);
        cont = NULL;
        if (page_url == NULL) {
            kube_fail(err, 0, "InternalError", "out of memory");
            res = KUBE_ERROR;
            break;
        }
        struct call call = {.method = "GET",
                            .path = page_url,
                            .idempotent = true,
                            .compressed = true,
                            .cancel = cancel,
                            .accept = page.decoder ? PROTOBUF_OR_JSON : NULL,
                            .stream = page.decoder ? &stream : NULL};
        res = list_page(client, path, &call, on_item, ctx, rv, &page, &cont, err);
        free(page_url);
    } while (res == KUBE_OK && cont != NULL);
    free(cont);
    free(page.next);
    kube_pb_list_free(page.decoder);
    return res;
}

enum kube_result kube_list(struct kube_client *client, const char *path, long limit, unsigned flags,
                           kube_item_fn on_item, void *ctx, char *rv, struct kube_error *err)
{
    return kube_list_cancellable(client, path, limit, flags, on_item, ctx, rv, NULL, err);
}
