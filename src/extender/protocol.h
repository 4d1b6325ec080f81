/* protocol.h -- kube-scheduler's extender JSON (k8s.io/kube-scheduler/extender/v1).
 *
 * The envelope is PascalCase (the Go types have no json tags):
 *   ExtenderArgs          {"Pod": v1.Pod, "Nodes": v1.NodeList|null, "NodeNames": [string]|null}
 *   ExtenderFilterResult  {"Nodes", "NodeNames", "FailedNodes": {node: reason}, "Error"}
 *   HostPriorityList      [{"Host": string, "Score": int}]   (0..10)
 *   ExtenderBindingArgs   {"PodName", "PodNamespace", "PodUID", "Node"}
 *   ExtenderBindingResult {"Error"}
 * nodeCacheCapable: true sends NodeNames only, false full Node objects in
 * Nodes.items; we answer in the form we were asked in.
 *
 * Parsing refuses, with a message naming the field: bodies that are not
 * JSON, nested deeper than PROTOCOL_MAX_DEPTH, holding more values than
 * their size allows (protocol_json_bounded), of the wrong shape or types.
 * Ownership: parsed structs own the decoded document (root) and borrow
 * everything else from it; *_free() releases it. */
#ifndef GP_EXTENDER_PROTOCOL_H
#define GP_EXTENDER_PROTOCOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "objects.h"
#include "compiler.h"
#include "buf.h"


/* Deepest nesting accepted. A v1.Pod or v1.Node (managedFields included)
 * stays well under 30; jansson's own limit is 2048 and its parser and
 * json_decref recurse, so a hostile body is cut here first. */
#define PROTOCOL_MAX_DEPTH 64

#define PROTOCOL_MAX_PRIORITY 10 /* MaxExtenderPriority */

struct extender_args {
    json_t *root;            /* owned */
    const json_t *pod;       /* the Pod, borrowed */
    struct pod_facts facts;  /* read from pod */
    bool node_cache_capable; /* NodeNames was given (else Nodes) */
    size_t count;
    const char **names;       /* malloc'ed array of borrowed node names */
    const json_t **name_json; /* the same names as JSON strings (for encoding), malloc'ed;
                                  NULL when the fast path read plain names into name_block */
    char *name_block;         /* owned copies of the names (fast path) */
    json_t **nodes;           /* Nodes.items[i] (NULL with NodeNames), malloc'ed, borrowed */
};

struct binding_args {
    json_t *root;                                          /* owned */
    const char *pod_name, *pod_namespace, *pod_uid, *node; /* borrowed; uid may be "" */
};

/* The nesting depth of a JSON text (strings skipped), or -1 beyond max. */
int protocol_json_depth(const char *text, size_t len, int max);

/* What a decoded document may cost, checked on the text before jansson
 * builds it: a container (object, array) costs jansson about 250 bytes
 * and an element or member about 60, against 2 and 2 bytes of text at
 * best ("{}", "0,"), so a body of small values would grow ~80-fold. At
 * most PROTOCOL_BASE_CONTAINERS + len / PROTOCOL_BYTES_PER_CONTAINER
 * containers and PROTOCOL_BASE_ITEMS + len / PROTOCOL_BYTES_PER_ITEM
 * elements and members are allowed: about 12 x len + 1 MiB in all. Real
 * requests stay far below (a Node object: ~150 bytes per container, ~30
 * per item; a NodeNames list is read without jansson). */
#define PROTOCOL_BASE_CONTAINERS 1024
#define PROTOCOL_BYTES_PER_CONTAINER 64
#define PROTOCOL_BASE_ITEMS 4096
#define PROTOCOL_BYTES_PER_ITEM 8

/* 0 when the text is within PROTOCOL_MAX_DEPTH and the budget above;
 * -1 + err ("request body nested deeper than ...", "... too many JSON
 * values for its size"). Strings are skipped. */
int protocol_json_bounded(const char *text, size_t len, char *err, size_t errlen) GP_MUST_USE;

int protocol_parse_args(const char *body, size_t len, struct extender_args *out, char *err,
                        size_t errlen) GP_MUST_USE;
void protocol_args_free(struct extender_args *args);

int protocol_parse_binding(const char *body, size_t len, struct binding_args *out, char *err,
                           size_t errlen) GP_MUST_USE;
void protocol_binding_free(struct binding_args *args);


/* Builds an ExtenderFilterResult node by node (the verdict callback of
 * cache_evaluate() fits protocol_filter_add's signature). The reply is
 * written as text while the verdicts come in: node names and Node objects
 * are encoded straight from the request's JSON values, so a 5,000-node
 * reply allocates no JSON value per node. */
struct filter_result {
    const struct extender_args *args;
    struct buf names;   /* (node_cache_capable: the reply's head, then) NodeNames elements */
    size_t names_start; /* where the elements begin in names */
    struct buf items;   /* Nodes.items elements (node_cache_capable false) */
    struct buf failed;  /* FailedNodes members */
};
void protocol_filter_begin(struct filter_result *r, const struct extender_args *args);
void protocol_filter_add(void *r, size_t i, bool fits, const char *reason);
/* The reply body (malloc'ed, compact JSON); frees r's parts. NULL when out of memory. */
GP_MUST_USE char *protocol_filter_finish(struct filter_result *r, size_t *len);

/* {"Nodes":null,"NodeNames":null,"FailedNodes":{},"Error":"<message>"} */
GP_MUST_USE char *protocol_filter_error(const char *message, size_t *len);

/* HostPriorityList from priorities[i] for args->names[i]. */
GP_MUST_USE char *protocol_priorities(const struct extender_args *args, const int *priorities,
                                      size_t *len);

/* {"Error":"<message>"} ("" for success): ExtenderBindingResult, and the
 * error body of every other endpoint. */
GP_MUST_USE char *protocol_error(const char *message, size_t *len);

/* Compact JSON of any value (malloc'ed); NULL when out of memory. */
GP_MUST_USE char *protocol_dump(const json_t *value, size_t *len);

#endif
