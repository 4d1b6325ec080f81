/* reflector.c -- list, then watch from the list's resourceVersion, forever.
 *
 * Keeps a caller's cache in sync with a collection the way client-go's
 * reflector does: a LIST (paged, consistent), then WATCHes resumed from the
 * last resourceVersion; 410 Gone re-lists at once, other failures back off.
 * Built on list.c and watch.c, stopped through a cancel token (cancel.c). */
#include "client.h"
#include "wire.h"

#include <string.h>

static bool callback_failed(const struct kube_error *err)
{
    return strcmp(err->reason, "CallbackError") == 0;
}

/* Backs off after the failures-th consecutive failure; true when cancelled.
 * A re-list request ends the wait early (checked every 250 ms). */
static bool reflector_backoff(struct kube_client *c, int failures, struct kube_cancel *cancel,
                              struct kube_cancel *relist)
{
    long wait = kube_backoff_ms(&c->retry, failures, kube_random01(c), 0);
    while (wait > 0) {
        long slice = relist != NULL && wait > 250 ? 250 : wait;
        if (kube_cancel_sleep(cancel, slice))
            return true;
        if (relist != NULL && kube_cancel_fired(relist))
            return false;
        wait -= slice;
    }
    return false;
}

static enum kube_result reflector_list(struct kube_client *c, const char *path, long page_limit,
                                       const struct kube_reflector_ops *ops, void *ctx, char *rv,
                                       struct kube_cancel *cancel, struct kube_error *err)
{
    if (ops->list_begin != NULL && ops->list_begin(ctx) != 0) {
        kube_fail(err, 0, "CallbackError", "LIST %s: list_begin failed", path);
        return KUBE_ERROR;
    }
    enum kube_result res = kube_list_cancellable(c, path, page_limit, KUBE_LIST_CONSISTENT,
                                                 ops->list_item, ctx, rv, cancel, err);
    if (res != KUBE_OK)
        return res;
    if (ops->list_end != NULL && ops->list_end(rv, ctx) != 0) {
        kube_fail(err, 0, "CallbackError", "LIST %s: list_end failed", path);
        return KUBE_ERROR;
    }
    return KUBE_OK;
}

enum kube_result kube_reflector_run(struct kube_client *client, const char *path, long page_limit,
                                    const struct kube_reflector_ops *ops, void *ctx,
                                    struct kube_cancel *cancel, struct kube_error *err)
{
    return kube_reflector_run_relist(client, path, page_limit, ops, ctx, cancel, NULL, err);
}

enum kube_result kube_reflector_run_relist(struct kube_client *client, const char *path,
                                           long page_limit, const struct kube_reflector_ops *ops,
                                           void *ctx, struct kube_cancel *cancel,
                                           struct kube_cancel *relist, struct kube_error *err)
{
    if (ops == NULL || ops->list_item == NULL || ops->event == NULL) {
        kube_fail(err, 0, "InvalidArgument", "reflector %s: list_item and event are required",
                  path);
        return KUBE_ERROR;
    }
    char rv[KUBE_RV_MAX] = "";
    bool need_list = true;
    int failures = 0;
    for (;;) {
        enum kube_result res;
        size_t events = 0;
        /* Reset before the LIST starts: a request made during it asks for
         * another one. */
        if (relist != NULL && kube_cancel_fired(relist)) {
            kube_cancel_reset(relist);
            need_list = true;
        }
        if (need_list)
            res = reflector_list(client, path, page_limit, ops, ctx, rv, cancel, err);
        else
            res =
                kube_watch_counted(client, path, rv, ops->event, ctx, cancel, relist, err, &events);
        if (res == KUBE_CANCELLED || (cancel != NULL && kube_cancel_fired(cancel))) {
            kube_fail(err, 0, "Cancelled", "reflector %s: cancelled", path);
            return KUBE_CANCELLED;
        }
        if (res == KUBE_ERROR && callback_failed(err))
            return KUBE_ERROR;
        if (relist != NULL && kube_cancel_fired(relist))
            continue; /* asked for a fresh LIST: at once, whatever this attempt did */
        if (res == KUBE_OK && need_list) {
            need_list = false;
            failures = 0;
            continue;
        }
        if (res == KUBE_OK && events > 0) { /* a healthy watch that the server ended */
            failures = 0;
            continue;
        }
        if (res == KUBE_GONE) { /* too old: re-list at once, nothing is broken */
            if (ops->on_error != NULL)
                ops->on_error(err, ctx);
            need_list = true;
            continue;
        }
        /* An error, or a watch that ended without a single event: do not
         * hammer the server. */
        if (res == KUBE_ERROR && ops->on_error != NULL)
            ops->on_error(err, ctx);
        if (failures < 30)
            failures++;
        if (reflector_backoff(client, failures, cancel, relist)) {
            kube_fail(err, 0, "Cancelled", "reflector %s: cancelled", path);
            return KUBE_CANCELLED;
        }
    }
}
