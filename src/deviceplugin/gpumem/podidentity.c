/* podidentity.c -- which pod a gpu-mem Allocate is for (see podidentity.h). */
#include "podidentity.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pods named in a message; the first few are enough to act on. */
#define NAMES_SHOWN 4

struct name_list {
    size_t count;
    const char *ns[NAMES_SHOWN], *name[NAMES_SHOWN];
    const struct gpumem_pod *first;
    bool first_repeat;
    unsigned first_container;
};

static void name_add(struct name_list *l, const char *ns, const char *name,
                     const struct gpumem_pod *pod, bool repeat, unsigned container)
{
    if (l->count == 0) {
        l->first = pod;
        l->first_repeat = repeat;
        l->first_container = container;
    }
    if (l->count < NAMES_SHOWN) {
        l->ns[l->count] = ns;
        l->name[l->count] = name;
    }
    l->count++;
}

static int names_text(const struct name_list *l, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l->count && i < NAMES_SHOWN && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s/%s", i ? ", " : "", l->ns[i],
                                 l->name[i]);
    if (l->count > NAMES_SHOWN && used < len)
        snprintf(out + used, len - used, " and %zu more", l->count - NAMES_SHOWN);
    return 0;
}

static const struct pr_container *pr_container_of(const struct pr_pod *p, const char *name)
{
    for (size_t c = 0; c < p->n_containers; c++)
        if (p->containers[c].name != NULL && strcmp(p->containers[c].name, name) == 0)
            return &p->containers[c];
    return NULL;
}

/* App containers of `pod` that request gpu-mem and hold none in List yet;
 * *app: how many app containers request gpu-mem at all. *lacking_units:
 * whether one of the lacking ones asks for `units`. */
static size_t lacking_app_containers(const struct gpumem_pod *pod, const struct pr_pod *listed,
                                     unsigned long long units, size_t *app, bool *lacking_units)
{
    size_t lacking = 0;
    *app = 0;
    *lacking_units = false;
    for (size_t c = 0; c < pod->n_containers; c++) {
        const struct gpumem_container *gc = &pod->containers[c];
        if (gc->init)
            continue;
        (*app)++;
        const struct pr_container *pc = pr_container_of(listed, gc->name);
        if (pc != NULL && pc->units > 0)
            continue;
        lacking++;
        if (gc->units == units)
            *lacking_units = true;
    }
    return lacking;
}

static bool has_init_of(const struct gpumem_pod *pod, unsigned long long units)
{
    for (size_t c = 0; c < pod->n_containers; c++)
        if (pod->containers[c].init && pod->containers[c].units == units)
            return true;
    return false;
}

/* The container a repeated call of `units` is for: the first app container
 * of that size that holds no devices in List, else the first init
 * container of that size (init containers never show devices). */
static unsigned repeat_container(const struct gpumem_pod *pod, const struct pr_pod *listed,
                                 unsigned long long units)
{
    for (size_t c = 0; c < pod->n_containers; c++) {
        const struct gpumem_container *gc = &pod->containers[c];
        if (gc->init || gc->units != units)
            continue;
        const struct pr_container *pc = pr_container_of(listed, gc->name);
        if (pc == NULL || pc->units == 0)
            return (unsigned)c;
    }
    for (size_t c = 0; c < pod->n_containers; c++)
        if (pod->containers[c].init && pod->containers[c].units == units)
            return (unsigned)c;
    return 0;
}

struct classes {
    struct name_list fresh, repeat, unknown, bad, mismatch;
    const struct gpumem_pod *mismatch_pod;
    unsigned long long mismatch_expected;
};

static void classify(const struct identity_source *src, const struct pr_pod *listed,
                     unsigned long long units, struct classes *k)
{
    const struct gpumem_pod *pod = src->lookup(src->ctx, listed->ns, listed->name);
    if (pod == NULL) {
        /* In the kubelet, not (yet) in our watch: it may be the one. */
        name_add(&k->unknown, listed->ns, listed->name, NULL, false, 0);
        return;
    }
    if (pod->deleted || pod->terminal)
        return;
    if (pod->bad != NULL) {
        name_add(&k->bad, pod->ns, pod->name, pod, false, 0);
        return;
    }
    if (pod->n_containers == 0)
        return;
    size_t app;
    bool lacking_units;
    size_t lacking = lacking_app_containers(pod, listed, units, &app, &lacking_units);
    /* Every app container holds devices: the kubelet is done with this pod
     * (its init containers came first), whatever our count says. */
    if (app > 0 && lacking == 0)
        return;
    unsigned done = src->progress(src->ctx, pod->uid);
    if (pod->assigned && done == 0)
        done = 1; /* the annotation outlived a lost ledger */
    if (done < gpumem_pod_calls(pod)) {
        unsigned long long expected = pod->containers[done].units;
        if (expected == units) {
            name_add(&k->fresh, pod->ns, pod->name, pod, false, done);
        } else {
            if (k->mismatch.count == 0) {
                k->mismatch_pod = pod;
                k->mismatch_expected = expected;
            }
            name_add(&k->mismatch, pod->ns, pod->name, pod, false, done);
        }
        return;
    }
    /* Answered in full before, yet the kubelet lacks devices for it: a
     * re-Allocate (kubelet restart without its checkpoint, container start
     * after a restart). Pods whose gpu-mem is in init containers only never
     * show devices in List and are not taken for a re-Allocate. */
    if (lacking > 0 && (lacking_units || has_init_of(pod, units)))
        name_add(&k->repeat, pod->ns, pod->name, pod, true, repeat_container(pod, listed, units));
}

static enum identity_result say(struct identity_decision *out, enum identity_result r,
                                const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum identity_result say(struct identity_decision *out, enum identity_result r,
                                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->why, sizeof out->why, fmt, ap);
    va_end(ap);
    return r;
}

enum identity_result identify_pod(const struct identity_source *src, const struct pr_list *list,
                                  unsigned long long units, struct identity_decision *out)
{
    struct classes k;
    char names[384];
    memset(&k, 0, sizeof k);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < list->n_pods; i++)
        classify(src, &list->pods[i], units, &k);

    if (k.unknown.count > 0) {
        names_text(&k.unknown, names, sizeof names);
        return say(out, IDENTITY_WAIT,
                   "the kubelet holds pod(s) %s that the plugin's watch of "
                   "this node's pods has not delivered yet",
                   names);
    }
    size_t candidates = k.fresh.count + k.repeat.count + k.bad.count;
    if (candidates == 1 && k.bad.count == 1)
        return say(out, IDENTITY_FAIL, "pod %s/%s: %s", k.bad.first->ns, k.bad.first->name,
                   k.bad.first->bad);
    if (candidates == 1) {
        const struct name_list *l = k.fresh.count ? &k.fresh : &k.repeat;
        out->pod = l->first;
        out->repeat = l->first_repeat;
        out->container = l->first_container;
        return IDENTITY_FOUND;
    }
    if (candidates > 1) {
        struct name_list all = k.fresh;
        for (size_t i = 0; i < k.repeat.count && i < NAMES_SHOWN; i++)
            name_add(&all, k.repeat.ns[i], k.repeat.name[i], NULL, true, 0);
        for (size_t i = 0; i < k.bad.count && i < NAMES_SHOWN; i++)
            name_add(&all, k.bad.ns[i], k.bad.name[i], NULL, false, 0);
        names_text(&all, names, sizeof names);
        return say(out, IDENTITY_WAIT,
                   "%zu pods the kubelet holds could be the one asking for "
                   "%llu units: %s (waiting for the others to be rejected or to finish)",
                   candidates, units, names);
    }
    if (k.mismatch.count > 0)
        return say(out, IDENTITY_FAIL,
                   "no pod the kubelet holds asks for %llu units next: pod "
                   "%s/%s expects a request of %llu",
                   units, k.mismatch_pod->ns, k.mismatch_pod->name, k.mismatch_expected);
    return say(out, IDENTITY_FAIL,
               "no pod the kubelet holds (%zu listed by its PodResources "
               "API) is waiting for aliyun.com/gpu-mem",
               list->n_pods);
}
