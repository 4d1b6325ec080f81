/* list_protobuf.c -- a LIST answer in Kubernetes' protobuf encoding, handed
 * to the caller as the same JSON items the JSON answer would give. See
 * kube.h (KUBE_LIST_PROTOBUF) and docs/kube.md.
 *
 * Why: at 5,000 nodes the apiserver spends several times longer encoding
 * a LIST as JSON than as protobuf, and the protobuf answer is less than
 * half the bytes. The items are decoded with proto/k8s_list.proto, which
 * holds only the fields gpupool reads (protobuf-c skips the others), and
 * turned into json_t by walking the protobuf-c descriptors, so callers
 * keep one item format whatever the server answered.
 *
 * The answer is "k8s\0" + runtime.Unknown whose raw bytes are the List.
 * The List's items are declared as bytes: each is unpacked alone, turned
 * into JSON, handed on and freed before the next, as the JSON walk does. */
#include "client.h"
#include "wire.h"

#include "k8s_list.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char magic[4] = {'k', '8', 's', 0};

static bool has_magic(const char *body, size_t len)
{
    return len >= sizeof magic && memcmp(body, magic, sizeof magic) == 0;
}

/* ---- protobuf-c message -> json_t ------------------------------------- */

/* Why a conversion failed ("out of memory", "a string is not UTF-8"). */
struct convert {
    const char *why;
};

static json_t *message_to_json(const ProtobufCMessage *msg, struct convert *cv);

/* Go does not check that a protobuf string is UTF-8, and its JSON encoder
 * replaces bad bytes with U+FFFD; an object a JSON client can read must
 * not fail the whole LIST here. A string that is not UTF-8 keeps its ASCII
 * and gets '?' for every other byte. */
static json_t *string_to_json(const char *s, struct convert *cv)
{
    size_t len = s ? strlen(s) : 0;
    json_t *v = json_stringn(s ? s : "", len);
    if (v == NULL && len > 0) {
        char *ascii = malloc(len);
        if (ascii != NULL) {
            for (size_t i = 0; i < len; i++)
                ascii[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
            v = json_stringn(ascii, len);
            free(ascii);
        }
    }
    if (v == NULL)
        cv->why = "out of memory";
    return v;
}

/* One value of a field; `value` points at the member (or array element). */
static json_t *value_to_json(const ProtobufCFieldDescriptor *fd, const void *value,
                             struct convert *cv)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING:
        return string_to_json(*(char *const *)value, cv);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)value);
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        return json_integer(*(const int32_t *)value);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)value);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *)value);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return json_integer((json_int_t)*(const uint64_t *)value);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *)value);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)value);
    case PROTOBUF_C_TYPE_MESSAGE:
        return message_to_json(*(ProtobufCMessage *const *)value, cv);
    case PROTOBUF_C_TYPE_BYTES:
        break; /* the .proto declares none inside an item */
    }
    cv->why = "a field of an unsupported type";
    return NULL;
}

/* A map<K, V> arrives as repeated messages {key = 1; value = 2} named
 * ...Entry (protoc-c generates them): JSON writes it as an object. */
static bool is_map_entry(const ProtobufCMessageDescriptor *d)
{
    size_t n = strlen(d->short_name);
    return n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 && d->n_fields == 2 &&
           d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 &&
           d->fields[0].type == PROTOBUF_C_TYPE_STRING && d->fields[1].id == 2;
}

static int map_to_json(const ProtobufCFieldDescriptor *fd, size_t n, const void *array,
                       json_t *out, struct convert *cv)
{
    const ProtobufCMessage *const *entries = array;
    const ProtobufCMessageDescriptor *d = fd->descriptor;
    for (size_t i = 0; i < n; i++) {
        const char *entry = (const char *)entries[i];
        const char *key = *(char *const *)(entry + d->fields[0].offset);
        json_t *value = value_to_json(&d->fields[1], entry + d->fields[1].offset, cv);
        if (value == NULL)
            return -1;
        if (json_object_set_new(out, key ? key : "", value) != 0) {
            cv->why = "a map key is not valid UTF-8 (or out of memory)";
            return -1;
        }
    }
    return 0;
}

static size_t element_size(const ProtobufCFieldDescriptor *fd)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* A repeated field: a map, else an array. Empty ones are left out, as
 * Kubernetes' JSON leaves them out (omitempty). */
static int repeated_to_json(const ProtobufCFieldDescriptor *fd, const char *msg, json_t *out,
                            struct convert *cv)
{
    size_t n = *(const size_t *)(msg + fd->quantifier_offset);
    const char *array = *(char *const *)(msg + fd->offset);
    if (n == 0)
        return 0;
    bool map = fd->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(fd->descriptor);
    json_t *value = map ? json_object() : json_array();
    if (value == NULL || json_object_set_new(out, fd->name, value) != 0) {
        cv->why = "out of memory";
        return -1;
    }
    if (map)
        return map_to_json(fd, n, array, value, cv);
    for (size_t i = 0; i < n; i++) {
        json_t *element = value_to_json(fd, array + i * element_size(fd), cv);
        if (element == NULL || json_array_append_new(value, element) != 0) {
            cv->why = cv->why ? cv->why : "out of memory";
            return -1;
        }
    }
    return 0;
}

/* A singular field: absent ones (NULL, no has_ flag) and empty strings
 * are left out, as in Kubernetes' JSON (omitempty), where Go's protobuf
 * encoder writes every string field, empty or not. */
static int singular_to_json(const ProtobufCFieldDescriptor *fd, const char *msg, json_t *out,
                            struct convert *cv)
{
    const void *member = msg + fd->offset;
    if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        const char *p = *(char *const *)member;
        if (p == NULL || (fd->type == PROTOBUF_C_TYPE_STRING && p[0] == '\0'))
            return 0;
    } else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
               !*(const protobuf_c_boolean *)(msg + fd->quantifier_offset)) {
        return 0;
    }
    json_t *value = value_to_json(fd, member, cv);
    if (value == NULL)
        return -1;
    if (json_object_set_new(out, fd->name, value) != 0) {
        cv->why = "out of memory";
        return -1;
    }
    return 0;
}

/* message -> object named by the .proto's field names (the JSON keys);
 * resource.Quantity -> its string, as JSON writes it. */
static json_t *message_to_json(const ProtobufCMessage *msg, struct convert *cv)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    if (d == &gpupool__k8s__quantity__descriptor)
        return string_to_json(((const Gpupool__K8s__Quantity *)msg)->string, cv);
    json_t *out = json_object();
    if (out == NULL) {
        cv->why = "out of memory";
        return NULL;
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        int rc = fd->label == PROTOBUF_C_LABEL_REPEATED
                     ? repeated_to_json(fd, (const char *)msg, out, cv)
                     : singular_to_json(fd, (const char *)msg, out, cv);
        if (rc != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* ---- the list --------------------------------------------------------- */

static enum kube_result bad(struct kube_error *err, const char *what, const char *why)
{
    kube_fail(err, 200, "BadResponse", "LIST %s: malformed protobuf answer: %s", what, why);
    return KUBE_ERROR;
}

/* The item message for a list kind; NULL for kinds this client has no
 * .proto for (it asked for protobuf only where it has one). */
static const ProtobufCMessageDescriptor *item_descriptor(const char *kind)
{
    if (kind == NULL)
        return NULL;
    if (strcmp(kind, "NodeList") == 0)
        return &gpupool__k8s__node__descriptor;
    if (strcmp(kind, "PodList") == 0)
        return &gpupool__k8s__pod__descriptor;
    if (strcmp(kind, "ConfigMapList") == 0)
        return &gpupool__k8s__config_map__descriptor;
    return NULL;
}

static enum kube_result walk_items(const Gpupool__K8s__List *list,
                                   const ProtobufCMessageDescriptor *item_type, const char *what,
                                   kube_item_fn on_item, void *ctx, struct kube_error *err)
{
    for (size_t i = 0; i < list->n_items; i++) {
        ProtobufCMessage *msg =
            protobuf_c_message_unpack(item_type, NULL, list->items[i].len, list->items[i].data);
        if (msg == NULL) {
            char why[96];
            snprintf(why, sizeof why, "item %zu is not a valid %.40s", i, item_type->short_name);
            return bad(err, what, why);
        }
        struct convert cv = {NULL};
        json_t *item = message_to_json(msg, &cv);
        protobuf_c_message_free_unpacked(msg, NULL);
        if (item == NULL) {
            char why[128];
            snprintf(why, sizeof why, "item %zu: %.80s", i, cv.why);
            return bad(err, what, why);
        }
        int stop = on_item(item, ctx);
        json_decref(item);
        if (stop != 0) {
            kube_fail(err, 0, "CallbackError", "LIST %s: the item callback stopped the list",
                      what);
            return KUBE_ERROR;
        }
    }
    return KUBE_OK;
}

static enum kube_result copy_list_meta(const Gpupool__K8s__ListMeta *meta, char *rv, char **next,
                                       struct kube_error *err, const char *what)
{
    const char *version = meta ? meta->resourceversion : NULL;
    const char *cont = meta ? meta->continue_ : NULL;
    if (rv != NULL && version != NULL)
        snprintf(rv, KUBE_RV_MAX, "%s", version);
    if (cont != NULL && cont[0] != '\0' && (*next = strdup(cont)) == NULL) {
        kube_fail(err, 0, "InternalError", "LIST %s: out of memory", what);
        return KUBE_ERROR;
    }
    return KUBE_OK;
}

enum kube_result kube_list_walk_protobuf(const char *body, size_t len, const char *what,
                                         kube_item_fn on_item, void *ctx, char *rv, char **next,
                                         struct kube_error *err)
{
    *next = NULL;
    if (!has_magic(body, len))
        return bad(err, what, "it does not start with \"k8s\\0\"");
    Gpupool__K8s__ListEnvelope *env = gpupool__k8s__list_envelope__unpack(
        NULL, len - sizeof magic, (const uint8_t *)body + sizeof magic);
    if (env == NULL)
        return bad(err, what, "the envelope (runtime.Unknown) does not decode");
    const char *kind = env->typemeta ? env->typemeta->kind : NULL;
    const ProtobufCMessageDescriptor *item_type = item_descriptor(kind);
    enum kube_result res;
    if (env->contentencoding != NULL && env->contentencoding[0] != '\0') {
        res = bad(err, what, "the envelope has a contentEncoding");
    } else if (item_type == NULL) {
        char why[192];
        snprintf(why, sizeof why, "unexpected kind \"%.100s\" (expected NodeList, PodList or "
                 "ConfigMapList)", kind ? kind : "");
        res = bad(err, what, why);
    } else if (env->raw == NULL) {
        res = bad(err, what, "the envelope holds no list");
    } else {
        res = walk_items(env->raw, item_type, what, on_item, ctx, err);
        if (res == KUBE_OK)
            res = copy_list_meta(env->raw->metadata, rv, next, err, what);
    }
    gpupool__k8s__list_envelope__free_unpacked(env, NULL);
    return res;
}

json_t *kube_protobuf_status(const char *body, size_t len)
{
    if (body == NULL || !has_magic(body, len))
        return NULL;
    Gpupool__K8s__StatusEnvelope *env = gpupool__k8s__status_envelope__unpack(
        NULL, len - sizeof magic, (const uint8_t *)body + sizeof magic);
    if (env == NULL)
        return NULL;
    json_t *status = NULL;
    const char *kind = env->typemeta ? env->typemeta->kind : NULL;
    if (kind != NULL && strcmp(kind, "Status") == 0 && env->raw != NULL) {
        struct convert cv = {NULL};
        status = message_to_json(&env->raw->base, &cv);
        if (status != NULL && json_object_set_new(status, "kind", json_string("Status")) != 0) {
            json_decref(status);
            status = NULL;
        }
    }
    gpupool__k8s__status_envelope__free_unpacked(env, NULL);
    return status;
}
