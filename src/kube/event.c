/* event.c -- core/v1 Events about a pod (see kube.h, kube_post_pod_event). */
#include "kube.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int kube_post_pod_event(struct kube_client *client, const struct kube_pod_event *ev,
                        struct kube_error *err)
{
    if (ev->ns == NULL || ev->name == NULL || ev->reason == NULL || ev->message == NULL ||
        ev->component == NULL)
        return kube_fail(err, 0, "InvalidArgument", "pod event: missing field");
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return kube_fail(err, 0, "InvalidArgument", "pod event: no clock");
    /* generateName "<pod>.": the server names it as kubectl shows events. */
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%.250s.", ev->name);
    json_t *involved = json_pack("{s:s, s:s, s:s, s:s}", "apiVersion", "v1", "kind", "Pod",
                                 "namespace", ev->ns, "name", ev->name);
    if (involved != NULL && ev->uid != NULL)
        json_object_set_new(involved, "uid", json_string(ev->uid));
    json_t *source = json_pack("{s:s}", "component", ev->component);
    if (source != NULL && ev->host != NULL)
        json_object_set_new(source, "host", json_string(ev->host));
    json_t *body =
        json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:o, s:s, s:s, s:i, s:s, s:s}",
                  "apiVersion", "v1", "kind", "Event", "metadata", "generateName", prefix,
                  "namespace", ev->ns, "involvedObject", involved, "reason", ev->reason, "message",
                  ev->message, "type", ev->warning ? "Warning" : "Normal", "source", source,
                  "firstTimestamp", now, "lastTimestamp", now, "count", 1, "reportingComponent",
                  ev->component, "reportingInstance", ev->host != NULL ? ev->host : "");
    if (body == NULL)
        return kube_fail(err, 0, "InvalidArgument",
                         "pod event for %s/%s: out of memory or bad text", ev->ns, ev->name);
    char *ns = kube_escape(ev->ns);
    int rc = -1;
    if (ns == NULL) {
        kube_fail(err, 0, "InvalidArgument", "pod event for %s/%s: out of memory", ev->ns,
                  ev->name);
    } else {
        char path[512];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/events", ns);
        rc = kube_post(client, path, body, NULL, err);
    }
    free(ns);
    json_decref(body);
    return rc;
}
