/* protocol.c -- the extender wire format (see protocol.h). */
#include "protocol.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One pass over JSON text, outside its strings: the deepest nesting, the
 * objects/arrays, and the elements (each container's first one and one per
 * comma). 0, or as soon as a limit is passed 1 (depth) or 2 (a count). */
struct json_shape {
    int deepest;
    size_t containers, items;
};
static int json_scan(const char *text, size_t len, int max_depth, size_t max_containers,
                     size_t max_items, struct json_shape *sh)
{
    int depth = 0;
    bool in_string = false;
    memset(sh, 0, sizeof(*sh));
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth)
                return 1;
            if (depth > sh->deepest)
                sh->deepest = depth;
            sh->containers++;
            sh->items++; /* its first element or member, if any */
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',') {
            sh->items++;
        } else {
            continue;
        }
        if (sh->containers > max_containers || sh->items > max_items)
            return 2;
    }
    return 0;
}

int protocol_json_depth(const char *text, size_t len, int max)
{
    struct json_shape sh;
    return json_scan(text, len, max, SIZE_MAX, SIZE_MAX, &sh) ? -1 : sh.deepest;
}

int protocol_json_bounded(const char *text, size_t len, char *err, size_t errlen)
{
    size_t max_containers = PROTOCOL_BASE_CONTAINERS + len / PROTOCOL_BYTES_PER_CONTAINER;
    size_t max_items = PROTOCOL_BASE_ITEMS + len / PROTOCOL_BYTES_PER_ITEM;
    struct json_shape sh;
    switch (json_scan(text, len, PROTOCOL_MAX_DEPTH, max_containers, max_items, &sh)) {
    case 0:
        return 0;
    case 1:
        snprintf(err, errlen, "request body nested deeper than %d levels", PROTOCOL_MAX_DEPTH);
        return -1;
    default:
        snprintf(err, errlen,
                 "request body holds too many JSON values for its %zu bytes (at most %zu "
                 "objects/arrays and %zu elements: they would cost the extender far more "
                 "memory than the text)",
                 len, max_containers, max_items);
        return -1;
    }
}

/* Decodes a body into an object, with the depth cut and a clear message. */
static json_t *decode_object(const char *body, size_t len, const char *what, char *err,
                             size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "empty request body: want %s JSON", what);
        return NULL;
    }
    if (protocol_json_bounded(body, len, err, errlen) < 0)
        return NULL;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "request body is not valid JSON (%s at line %d column %d)", jerr.text,
                 jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "request body must be a JSON object (%s)", what);
        json_decref(root);
        return NULL;
    }
    return root;
}

void protocol_args_free(struct extender_args *args)
{
    free(args->names);
    free(args->name_json);
    free(args->name_block);
    free(args->nodes);
    json_decref(args->root);
    memset(args, 0, sizeof(*args));
}

static int args_node_names(struct extender_args *out, const json_t *names, char *err, size_t errlen)
{
    if (!json_is_array(names)) {
        snprintf(err, errlen, "ExtenderArgs.NodeNames must be an array of strings");
        return -1;
    }
    out->node_cache_capable = true;
    out->count = json_array_size(names);
    out->names = calloc(out->count ? out->count : 1, sizeof(*out->names));
    out->name_json = calloc(out->count ? out->count : 1, sizeof(*out->name_json));
    if (!out->names || !out->name_json) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < out->count; i++) {
        out->name_json[i] = json_array_get(names, i);
        out->names[i] = json_string_value(out->name_json[i]);
        if (!out->names[i]) {
            snprintf(err, errlen, "ExtenderArgs.NodeNames[%zu] must be a string", i);
            return -1;
        }
    }
    return 0;
}

static int args_nodes(struct extender_args *out, const json_t *nodes, char *err, size_t errlen)
{
    json_t *items = json_object_get(nodes, "items");
    if (!json_is_object(nodes) || !json_is_array(items)) {
        snprintf(err, errlen, "ExtenderArgs.Nodes must be a NodeList with an items array");
        return -1;
    }
    out->count = json_array_size(items);
    out->names = calloc(out->count ? out->count : 1, sizeof(*out->names));
    out->nodes = calloc(out->count ? out->count : 1, sizeof(*out->nodes));
    out->name_json = calloc(out->count ? out->count : 1, sizeof(*out->name_json));
    if (!out->names || !out->nodes || !out->name_json) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < out->count; i++) {
        json_t *item = json_array_get(items, i);
        out->nodes[i] = item;
        out->name_json[i] = json_object_get(json_object_get(item, "metadata"), "name");
        out->names[i] = json_string_value(out->name_json[i]);
        if (!out->names[i]) {
            snprintf(err, errlen, "ExtenderArgs.Nodes.items[%zu].metadata.name must be a string",
                     i);
            return -1;
        }
    }
    return 0;
}

/* ---- fast path for NodeNames -------------------------------------------
 *
 * With nodeCacheCapable, most of a request is NodeNames: 5,000 short strings
 * that jansson would allocate one by one (about 2 ms to parse and free at
 * 5,000 nodes). When the envelope is exactly {"Pod": {...}, "Nodes": null,
 * "NodeNames": [plain names]} in any order, the names are read in place
 * (they are DNS names: no escapes, nothing to decode) and jansson parses
 * only the Pod. Anything else -- other keys, escapes, duplicates, odd
 * spacing inside names -- takes the general path, so both paths accept and
 * refuse exactly the same documents. */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Characters of a plain key or name, [A-Za-z0-9._-], as a bit set over
 * ASCII: one test per byte, because every byte of 5,000 names goes
 * through it. */
static const uint64_t plain_low = (UINT64_C(3) << '-') | (UINT64_C(0x3ff) << '0');
static const uint64_t plain_high = (UINT64_C(0x3ffffff) << ('A' - 64)) |
                                   (UINT64_C(1) << ('_' - 64)) |
                                   (UINT64_C(0x3ffffff) << ('a' - 64));

static bool plain_char(char c)
{
    unsigned char u = (unsigned char)c;
    return u < 128 && (((u < 64 ? plain_low : plain_high) >> (u & 63)) & 1);
}

/* A plain key or name: "[A-Za-z0-9._-]+". Returns the end quote's next
 * character, or NULL. */
static const char *plain_string(const char *p, const char *end, const char **start, size_t *len)
{
    if (p >= end || *p != '"')
        return NULL;
    const char *q = ++p;
    while (q < end && plain_char(*q))
        q++;
    if (q == p || q >= end || *q != '"')
        return NULL;
    *start = p;
    *len = (size_t)(q - p);
    return q + 1;
}

/* The end of the object or array starting at p (strings skipped). */
static const char *skip_container(const char *p, const char *end)
{
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\')
                    p++;
            if (p >= end)
                return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            return p + 1;
        }
    }
    return NULL;
}

/* Reads the plain names of the array at p ('[') into out; *after: the
 * character after ']'. */
static int fast_names(const char *p, const char *end, struct extender_args *out, const char **after)
{
    size_t cap = 64, n = 0;
    const char **names = malloc(cap * sizeof(*names));
    size_t *lens = malloc(cap * sizeof(*lens));
    if (!names || !lens)
        goto fallback;
    p = skip_ws(p + 1, end); /* after '[' */
    if (p < end && *p == ']')
        goto done;
    for (;;) {
        const char *start;
        size_t len;
        if (!(p = plain_string(p, end, &start, &len)))
            goto fallback;
        if (n == cap) {
            cap *= 2;
            const char **nn = realloc(names, cap * sizeof(*names));
            if (nn)
                names = nn;
            size_t *nl = realloc(lens, cap * sizeof(*lens));
            if (nl)
                lens = nl;
            if (!nn || !nl)
                goto fallback;
        }
        names[n] = start;
        lens[n++] = len;
        p = skip_ws(p, end);
        if (p < end && *p == ']')
            break;
        if (p >= end || *p != ',')
            goto fallback;
        p = skip_ws(p + 1, end);
    }
done:
    *after = p + 1; /* past ']' */
    /* Names live in the request body: terminate each in place is not
     * possible (const), so copy them into one block. */
    {
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += lens[i] + 1;
        char *block = malloc(total ? total : 1);
        const char **table = realloc(names, (n ? n : 1) * sizeof(*names));
        if (!block || !table) {
            free(block);
            names = table ? table : names;
            goto fallback;
        }
        names = table;
        char *w = block;
        for (size_t i = 0; i < n; i++) {
            memcpy(w, names[i], lens[i]);
            w[lens[i]] = '\0';
            names[i] = w;
            w += lens[i] + 1;
        }
        free(lens);
        out->names = names;
        out->name_block = block;
        out->count = n;
        out->node_cache_capable = true;
        return 0;
    }
fallback:
    free(names);
    free(lens);
    return -1;
}

/* Splits {"Pod":{..},"Nodes":null,"NodeNames":[..]}, reading the names
 * into out as it goes (one pass over them); -1: use the general path
 * (out may then hold names: the caller frees them). */
static int fast_envelope(const char *body, size_t len, const char **pod, size_t *pod_len,
                         struct extender_args *out)
{
    const char *p = skip_ws(body, body + len), *end = body + len;
    unsigned seen = 0;
    if (p >= end || *p != '{')
        return -1;
    p = skip_ws(p + 1, end);
    for (;;) {
        const char *key;
        size_t klen;
        if (!(p = plain_string(p, end, &key, &klen)))
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return -1;
        p = skip_ws(p + 1, end);
        unsigned bit = klen == 3 && memcmp(key, "Pod", 3) == 0         ? 1u
                       : klen == 5 && memcmp(key, "Nodes", 5) == 0     ? 2u
                       : klen == 9 && memcmp(key, "NodeNames", 9) == 0 ? 4u
                                                                       : 0u;
        if (!bit || (seen & bit))
            return -1;
        seen |= bit;
        const char *value = p;
        if (bit == 2) {
            if ((size_t)(end - p) < 4 || memcmp(p, "null", 4) != 0)
                return -1;
            p += 4;
        } else if (bit == 1) {
            if (p >= end || *p != '{' || !(p = skip_container(p, end)))
                return -1;
            *pod = value;
            *pod_len = (size_t)(p - value);
        } else {
            if (p >= end || *p != '[' || fast_names(p, end, out, &p) < 0)
                return -1;
        }
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            break;
        if (p >= end || *p != ',')
            return -1;
        p = skip_ws(p + 1, end);
    }
    p = skip_ws(p + 1, end);
    return p == end && (seen & 5) == 5 ? 0 : -1;
}

/* The body's depth is the Pod's plus one (the envelope; the names are a
 * flat array), so only the Pod is measured: the general path words the
 * error for a body nested too deep. */
static int parse_args_fast(const char *body, size_t len, struct extender_args *out)
{
    const char *pod = NULL;
    size_t pod_len = 0;
    char why[8]; /* the general path words the error */
    if (fast_envelope(body, len, &pod, &pod_len, out) < 0 ||
        protocol_json_depth(pod, pod_len, PROTOCOL_MAX_DEPTH - 1) < 0 ||
        protocol_json_bounded(pod, pod_len, why, sizeof why) < 0) {
        protocol_args_free(out);
        return -1;
    }
    json_error_t jerr;
    out->root = json_loadb(pod, pod_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!out->root) {
        protocol_args_free(out); /* the general path words the error */
        return -1;
    }
    out->pod = out->root;
    return 0;
}

int protocol_parse_args(const char *body, size_t len, struct extender_args *out, char *err,
                        size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (len > 0 && parse_args_fast(body, len, out) == 0)
        goto read_pod;
    if (!(out->root = decode_object(body, len, "ExtenderArgs", err, errlen)))
        return -1;
    out->pod = json_object_get(out->root, "Pod");
    if (!json_is_object(out->pod)) {
        snprintf(err, errlen, "ExtenderArgs.Pod must be a Pod object");
        goto fail;
    }
read_pod:;
    char why[240];
    if (poolapi_pod_facts(out->pod, &out->facts, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "ExtenderArgs.Pod: %s", why);
        goto fail;
    }
    if (out->name_block)
        return 0; /* names already read by the fast path */
    json_t *names = json_object_get(out->root, "NodeNames");
    json_t *nodes = json_object_get(out->root, "Nodes");
    int rc;
    if (names && !json_is_null(names))
        rc = args_node_names(out, names, err, errlen);
    else if (nodes && !json_is_null(nodes))
        rc = args_nodes(out, nodes, err, errlen);
    else {
        snprintf(err, errlen, "ExtenderArgs has neither NodeNames nor Nodes");
        rc = -1;
    }
    if (rc == 0)
        return 0;
fail:
    protocol_args_free(out);
    return -1;
}

void protocol_binding_free(struct binding_args *args)
{
    json_decref(args->root);
    memset(args, 0, sizeof(*args));
}

/* Kubernetes' own name rules, which also keep the names safe to put into
 * API paths: libcurl folds "." and ".." path segments, so a looser check
 * let a bind read and write other resources. A DNS-1123 label is
 * [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 bytes; a subdomain is labels
 * joined by '.', at most 253 bytes.
 *
 * n bytes of [a-z0-9-], starting and ending with an alphanumeric. */
static bool dns_part_ok(const char *s, size_t n)
{
    if (n == 0 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return true;
}

/* Namespaces (IsDNS1123Label). */
static bool valid_dns_label(const char *s)
{
    size_t n = strlen(s);
    return n <= 63 && dns_part_ok(s, n);
}

/* Pod and node names (IsDNS1123Subdomain): its dot-separated parts are
 * not limited to 63 bytes there, only the whole to 253. */
static bool valid_dns_subdomain(const char *s)
{
    if (strlen(s) > 253)
        return false;
    for (const char *part = s;;) {
        const char *dot = strchr(part, '.');
        if (!dns_part_ok(part, dot ? (size_t)(dot - part) : strlen(part)))
            return false;
        if (dot == NULL)
            return true;
        part = dot + 1;
    }
}

int protocol_parse_binding(const char *body, size_t len, struct binding_args *out, char *err,
                           size_t errlen)
{
    static const char *const keys[] = {"PodName", "PodNamespace", "PodUID", "Node"};
    const char **fields[] = {&out->pod_name, &out->pod_namespace, &out->pod_uid, &out->node};
    memset(out, 0, sizeof(*out));
    if (!(out->root = decode_object(body, len, "ExtenderBindingArgs", err, errlen)))
        return -1;
    for (size_t i = 0; i < 4; i++) {
        json_t *v = json_object_get(out->root, keys[i]);
        *fields[i] = json_string_value(v);
        if (v && !json_is_string(v)) {
            snprintf(err, errlen, "ExtenderBindingArgs.%s must be a string", keys[i]);
            goto fail;
        }
        if (i == 2 && !*fields[i])
            *fields[i] = ""; /* PodUID is optional: we look the pod up */
        else if (!*fields[i] || !**fields[i]) {
            snprintf(err, errlen, "ExtenderBindingArgs.%s is missing or empty", keys[i]);
            goto fail;
        } else if (i == 1 && !valid_dns_label(*fields[i])) {
            snprintf(err, errlen,
                     "ExtenderBindingArgs.PodNamespace \"%.64s\" is not a valid object name "
                     "(a namespace is a DNS-1123 label)",
                     *fields[i]);
            goto fail;
        } else if ((i == 0 || i == 3) && !valid_dns_subdomain(*fields[i])) {
            snprintf(err, errlen,
                     "ExtenderBindingArgs.%s \"%.64s\" is not a valid object name "
                     "(a DNS-1123 subdomain)",
                     keys[i], *fields[i]);
            goto fail;
        } else if (i == 2 && (strpbrk(*fields[i], "/?#%& ") || strcmp(*fields[i], ".") == 0 ||
                              strcmp(*fields[i], "..") == 0)) {
            snprintf(err, errlen, "ExtenderBindingArgs.PodUID \"%.64s\" is not a UID", *fields[i]);
            goto fail;
        }
    }
    return 0;
fail:
    protocol_binding_free(out);
    return -1;
}

/* ---- replies ------------------------------------------------------------- */

/* Messages are cut with "%.Ns", which can split a UTF-8 sequence; jansson
 * refuses such strings, so bad bytes become '?'. */
static void utf8_repair(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = *p < 0x80           ? 1
                : (*p >> 5) == 0x6  ? 2
                : (*p >> 4) == 0xe  ? 3
                : (*p >> 3) == 0x1e ? 4
                                    : 0;
        int k = 1;
        while (n > 1 && k < n && (p[k] & 0xc0) == 0x80)
            k++;
        if (n == 0 || k < n) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

static json_t *message_string(const char *message)
{
    json_t *v = json_string(message);
    if (v)
        return v;
    char *copy = strdup(message);
    if (!copy)
        return NULL;
    utf8_repair(copy);
    v = json_string(copy);
    free(copy);
    return v;
}

char *protocol_dump(const json_t *value, size_t *len)
{
    char *s = value ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    *len = s ? strlen(s) : 0;
    return s;
}

/* Appends the compact encoding of v (jansson does the escaping). */
static void text_append_json(struct buf *b, const json_t *v)
{
    const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    if (!v || b->failed) {
        b->failed = true;
        return;
    }
    size_t room = b->cap > b->len ? b->cap - b->len - 1 : 0;
    size_t n = json_dumpb(v, room ? b->data + b->len : NULL, room, flags);
    if (n == 0) {
        b->failed = true;
        return;
    }
    if (n > room) {
        if (!buf_reserve(b, n))
            return;
        n = json_dumpb(v, b->data + b->len, n, flags);
    }
    b->len += n;
    b->data[b->len] = '\0';
}

static void text_separator(struct buf *b)
{
    if (b->len)
        buf_add(b, ",", 1);
}

/* A node name as a JSON string: fast-path names are plain (no escaping). */
static void append_name(struct buf *b, const struct extender_args *args, size_t i)
{
    if (args->name_json) {
        text_append_json(b, args->name_json[i]);
        return;
    }
    buf_add(b, "\"", 1);
    buf_str(b, args->names[i]);
    buf_add(b, "\"", 1);
}

void protocol_filter_begin(struct filter_result *r, const struct extender_args *args)
{
    memset(r, 0, sizeof(*r));
    r->args = args;
    /* One allocation for the usual answer (most nodes pass): the envelope's
     * head, then the names; growing by doubling would copy it repeatedly. */
    size_t need = 64;
    for (size_t i = 0; i < args->count; i++)
        need += strlen(args->names[i]) + 3;
    buf_reserve(&r->names, need);
    buf_str(&r->names, args->node_cache_capable ? "{\"Nodes\":null,\"NodeNames\":[" : "");
    r->names_start = r->names.len;
}

void protocol_filter_add(void *ctx, size_t i, bool fits, const char *reason)
{
    struct filter_result *r = ctx;
    const struct extender_args *args = r->args;
    if (fits) {
        if (r->names.len > r->names_start)
            buf_add(&r->names, ",", 1);
        append_name(&r->names, args, i);
        if (!args->node_cache_capable) {
            text_separator(&r->items);
            text_append_json(&r->items, args->nodes[i]);
        }
        return;
    }
    json_t *why = message_string(reason);
    text_separator(&r->failed);
    append_name(&r->failed, args, i);
    buf_add(&r->failed, ":", 1);
    text_append_json(&r->failed, why);
    json_decref(why);
}

char *protocol_filter_finish(struct filter_result *r, size_t *len)
{
    struct buf out = {0};
    bool oom = r->names.failed || r->items.failed || r->failed.failed;
    if (!oom && r->args->node_cache_capable) {
        out = r->names; /* already holds the head and the names */
        r->names = (struct buf){0};
    } else if (!oom) {
        buf_reserve(&out, r->items.len + r->names.len + r->failed.len + 160);
        buf_str(&out, "{\"Nodes\":{\"metadata\":{},\"items\":[");
        buf_add(&out, r->items.data ? r->items.data : "", r->items.len);
        buf_str(&out, "]},\"NodeNames\":[");
        buf_add(&out, r->names.data ? r->names.data : "", r->names.len);
    }
    if (!oom) {
        buf_reserve(&out, r->failed.len + 96);
        buf_str(&out, "],\"FailedNodes\":{");
        buf_add(&out, r->failed.data ? r->failed.data : "", r->failed.len);
        buf_str(&out, "},\"FailedAndUnresolvableNodes\":null,\"Error\":\"\"}");
    }
    free(r->names.data);
    free(r->items.data);
    free(r->failed.data);
    memset(r, 0, sizeof(*r));
    if (oom || out.failed) {
        free(out.data);
        *len = 0;
        return NULL;
    }
    *len = out.len;
    return out.data;
}

char *protocol_filter_error(const char *message, size_t *len)
{
    json_t *result = json_pack("{s:n, s:n, s:{}, s:n, s:o}", "Nodes", "NodeNames", "FailedNodes",
                               "FailedAndUnresolvableNodes", "Error", message_string(message));
    char *body = protocol_dump(result, len);
    json_decref(result);
    return body;
}

char *protocol_priorities(const struct extender_args *args, const int *priorities, size_t *len)
{
    struct buf out = {0};
    size_t need = 8;
    for (size_t i = 0; i < args->count; i++)
        need += strlen(args->names[i]) + 32;
    buf_reserve(&out, need);
    buf_str(&out, "[");
    for (size_t i = 0; i < args->count; i++) {
        char score[40];
        buf_str(&out, i ? ",{\"Host\":" : "{\"Host\":");
        append_name(&out, args, i);
        snprintf(score, sizeof(score), ",\"Score\":%d}", priorities[i]);
        buf_str(&out, score);
    }
    buf_str(&out, "]");
    if (out.failed) {
        free(out.data);
        *len = 0;
        return NULL;
    }
    *len = out.len;
    return out.data;
}

char *protocol_error(const char *message, size_t *len)
{
    json_t *result = json_pack("{s:o}", "Error", message_string(message));
    char *body = protocol_dump(result, len);
    json_decref(result);
    return body;
}
