/* event.c -- core/v1 Events about an object (see kube.h, kube_post_event). */
#include "kube.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int kube_post_event(struct kube_client *client, const struct kube_object_ref *about, bool warning,
                    const char *reason, const char *message, const char *component,
                    const char *host, struct kube_error *err)
{
    if (about == NULL || about->api_version == NULL || about->kind == NULL || about->name == NULL ||
        reason == NULL || message == NULL || component == NULL)
        return kube_fail(err, 0, "InvalidArgument", "event: missing field");
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return kube_fail(err, 0, "InvalidArgument", "event: no clock");
    /* A cluster-scoped object's Events live in "default": kubectl
     * describe looks for them there. */
    const char *event_ns = about->ns != NULL ? about->ns : "default";
    /* generateName "<object>.": the server names it as kubectl shows events. */
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%.250s.", about->name);
    json_t *involved = json_pack("{s:s, s:s, s:s}", "apiVersion", about->api_version, "kind",
                                 about->kind, "name", about->name);
    if (involved != NULL && about->ns != NULL)
        json_object_set_new(involved, "namespace", json_string(about->ns));
    if (involved != NULL && about->uid != NULL)
        json_object_set_new(involved, "uid", json_string(about->uid));
    json_t *source = json_pack("{s:s}", "component", component);
    if (source != NULL && host != NULL)
        json_object_set_new(source, "host", json_string(host));
    json_t *body =
        json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:o, s:s, s:s, s:i, s:s, s:s}",
                  "apiVersion", "v1", "kind", "Event", "metadata", "generateName", prefix,
                  "namespace", event_ns, "involvedObject", involved, "reason", reason, "message",
                  message, "type", warning ? "Warning" : "Normal", "source", source,
                  "firstTimestamp", now, "lastTimestamp", now, "count", 1, "reportingComponent",
                  component, "reportingInstance", host != NULL ? host : "");
    if (body == NULL)
        return kube_fail(err, 0, "InvalidArgument", "event about %s %s: out of memory or bad text",
                         about->kind, about->name);
    char *ns = kube_escape(event_ns);
    int rc = -1;
    if (ns == NULL) {
        kube_fail(err, 0, "InvalidArgument", "event about %s %s: out of memory", about->kind,
                  about->name);
    } else {
        char path[512];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/events", ns);
        rc = kube_post(client, path, body, NULL, err);
    }
    free(ns);
    json_decref(body);
    return rc;
}

int kube_post_pod_event(struct kube_client *client, const struct kube_pod_event *ev,
                        struct kube_error *err)
{
    if (ev->ns == NULL || ev->name == NULL || ev->reason == NULL || ev->message == NULL ||
        ev->component == NULL)
        return kube_fail(err, 0, "InvalidArgument", "pod event: missing field");
    const struct kube_object_ref pod = {
        .api_version = "v1", .kind = "Pod", .ns = ev->ns, .name = ev->name, .uid = ev->uid};
    return kube_post_event(client, &pod, ev->warning, ev->reason, ev->message, ev->component,
                           ev->host, err);
}
