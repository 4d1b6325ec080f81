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
 * The answer is "k8s\0" + runtime.Unknown whose raw bytes (field 2) are
 * the List. It is decoded as it arrives, from libcurl's write callback
 * (kube_pb_list_feed): a small machine reads tags and lengths of the two
 * enclosing messages by hand (protobuf-c has no streaming API), enters the
 * envelope's field 2 and walks the List's fields without buffering them;
 * every other field, and each item, is collected only until complete, then
 * unpacked with protobuf-c, turned into JSON, handed on and dropped. So
 * memory holds one item and one network chunk whatever the list's size,
 * and decoding overlaps the apiserver's sending. */
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
        return json_integer((json_int_t) * (const uint64_t *)value);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *)value);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)value);
    case PROTOBUF_C_TYPE_MESSAGE: {
        /* A map entry may come without its value (key only): Go decodes
         * that as the zero value, a zero Quantity writes as "0" and a zero
         * struct as an object of its empty fields. */
        const ProtobufCMessage *msg = *(ProtobufCMessage *const *)value;
        if (msg != NULL)
            return message_to_json(msg, cv);
        if (fd->descriptor == &gpupool__k8s__quantity__descriptor)
            return string_to_json("0", cv);
        json_t *empty = json_object();
        if (empty == NULL)
            cv->why = "out of memory";
        return empty;
    }
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

static int map_to_json(const ProtobufCFieldDescriptor *fd, size_t n, const void *array, json_t *out,
                       struct convert *cv)
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

/* ---- the list, decoded while it arrives ------------------------------ */

/* Protobuf wire types (the low 3 bits of a tag). */
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

/* Where the machine is: reading the magic, a tag, a length, skipping a
 * scalar, or collecting the bytes of a length-delimited field. */
enum pb_state { PB_MAGIC, PB_TAG, PB_LENGTH, PB_SKIP_VARINT, PB_SKIP, PB_FIELD };

/* Nesting: the envelope (runtime.Unknown), or inside its field 2, the List. */
enum pb_level { PB_ENVELOPE, PB_LIST };

struct kube_pb_list {
    const char *what;
    kube_item_fn on_item;
    void *ctx;
    size_t max_field; /* largest field (an item) buffered */

    enum pb_state state;
    enum pb_level level;
    uint64_t offset;   /* bytes consumed after the magic */
    uint64_t list_end; /* offset where the List (envelope field 2) ends */
    uint64_t varint;   /* the varint being read */
    unsigned varint_shift;
    uint32_t field;     /* field number of the current element */
    uint64_t remaining; /* bytes left to skip or collect */

    char *buf; /* the field being collected; owned */
    size_t buf_len, buf_cap, peak;

    const ProtobufCMessageDescriptor *item_type; /* from TypeMeta.kind */
    bool saw_list;
    size_t items; /* handed to on_item */
    char rv[KUBE_RV_MAX];
    char *cont; /* ListMeta.continue, malloc'ed; NULL when none */
};

static int bad(struct kube_error *err, const char *what, const char *why)
{
    kube_fail(err, 200, "BadResponse", "LIST %s: malformed protobuf answer: %s", what, why);
    return -1;
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

struct kube_pb_list *kube_pb_list_new(const char *what, kube_item_fn on_item, void *ctx,
                                      size_t max_field)
{
    struct kube_pb_list *pb = calloc(1, sizeof *pb);
    if (pb == NULL)
        return NULL;
    pb->what = what;
    pb->on_item = on_item;
    pb->ctx = ctx;
    pb->max_field = max_field;
    return pb;
}

void kube_pb_list_reset(struct kube_pb_list *pb)
{
    free(pb->cont);
    pb->cont = NULL;
    pb->state = PB_MAGIC;
    pb->level = PB_ENVELOPE;
    pb->offset = pb->list_end = pb->varint = pb->remaining = 0;
    pb->varint_shift = 0;
    pb->field = 0;
    pb->buf_len = 0;
    pb->item_type = NULL;
    pb->saw_list = false;
    pb->items = 0;
    pb->rv[0] = '\0';
}

void kube_pb_list_free(struct kube_pb_list *pb)
{
    if (pb == NULL)
        return;
    free(pb->cont);
    free(pb->buf);
    free(pb);
}

size_t kube_pb_list_items(const struct kube_pb_list *pb)
{
    return pb->items;
}

size_t kube_pb_list_peak(const struct kube_pb_list *pb)
{
    return pb->peak;
}

/* ---- handling one complete field ---- */

static int handle_type_meta(struct kube_pb_list *pb, const uint8_t *data, size_t len,
                            struct kube_error *err)
{
    Gpupool__K8s__TypeMeta *tm = gpupool__k8s__type_meta__unpack(NULL, len, data);
    if (tm == NULL)
        return bad(err, pb->what, "the envelope's TypeMeta does not decode");
    pb->item_type = item_descriptor(tm->kind);
    int rc = 0;
    if (pb->item_type == NULL) {
        char why[192];
        snprintf(why, sizeof why,
                 "unexpected kind \"%.100s\" (expected NodeList, PodList or "
                 "ConfigMapList)",
                 tm->kind ? tm->kind : "");
        rc = bad(err, pb->what, why);
    }
    gpupool__k8s__type_meta__free_unpacked(tm, NULL);
    return rc;
}

static int handle_list_meta(struct kube_pb_list *pb, const uint8_t *data, size_t len,
                            struct kube_error *err)
{
    Gpupool__K8s__ListMeta *meta = gpupool__k8s__list_meta__unpack(NULL, len, data);
    if (meta == NULL)
        return bad(err, pb->what, "the List's metadata does not decode");
    int rc = 0;
    if (meta->resourceversion != NULL)
        snprintf(pb->rv, sizeof pb->rv, "%s", meta->resourceversion);
    free(pb->cont);
    pb->cont = NULL;
    if (meta->continue_ != NULL && meta->continue_[0] != '\0' &&
        (pb->cont = strdup(meta->continue_)) == NULL)
        rc = kube_fail(err, 0, "InternalError", "LIST %s: out of memory", pb->what);
    gpupool__k8s__list_meta__free_unpacked(meta, NULL);
    return rc;
}

static int handle_item(struct kube_pb_list *pb, const uint8_t *data, size_t len,
                       struct kube_error *err)
{
    ProtobufCMessage *msg = protobuf_c_message_unpack(pb->item_type, NULL, len, data);
    if (msg == NULL) {
        char why[96];
        snprintf(why, sizeof why, "item %zu is not a valid %.40s", pb->items,
                 pb->item_type->short_name);
        return bad(err, pb->what, why);
    }
    struct convert cv = {NULL};
    json_t *item = message_to_json(msg, &cv);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (item == NULL) {
        char why[128];
        snprintf(why, sizeof why, "item %zu: %.80s", pb->items, cv.why);
        return bad(err, pb->what, why);
    }
    pb->items++; /* handed over: from here a broken transfer is not retried */
    int stop = pb->on_item(item, pb->ctx);
    json_decref(item);
    if (stop != 0)
        return kube_fail(err, 0, "CallbackError", "LIST %s: the item callback stopped the list",
                         pb->what);
    return 0;
}

/* A complete length-delimited field of the envelope (1, 3; others are
 * dropped) or of the List (1, 2). */
static int handle_field(struct kube_pb_list *pb, const uint8_t *data, size_t len,
                        struct kube_error *err)
{
    if (pb->level == PB_LIST) {
        if (pb->field == 1)
            return handle_list_meta(pb, data, len, err);
        return pb->field == 2 ? handle_item(pb, data, len, err) : 0;
    }
    if (pb->field == 1)
        return handle_type_meta(pb, data, len, err);
    if (pb->field == 3 && len > 0)
        return bad(err, pb->what, "the envelope has a contentEncoding");
    return 0;
}

/* ---- the machine ---- */

/* After an element of the List: back to the envelope at the List's end. */
static void element_done(struct kube_pb_list *pb)
{
    pb->state = PB_TAG;
    if (pb->level == PB_LIST && pb->offset == pb->list_end)
        pb->level = PB_ENVELOPE;
}

/* Bytes an element may still take: the rest of the List inside it. */
static bool fits(const struct kube_pb_list *pb, uint64_t len)
{
    return pb->level != PB_LIST || len <= pb->list_end - pb->offset;
}

/* A tag was read: decide how its value is consumed. */
static int on_tag(struct kube_pb_list *pb, struct kube_error *err)
{
    uint64_t tag = pb->varint;
    pb->field = (uint32_t)(tag >> 3);
    if (pb->field == 0 || tag >> 3 > 0x1fffffff)
        return bad(err, pb->what, "a field number is out of range");
    switch (tag & 7) {
    case WIRE_VARINT:
        pb->state = PB_SKIP_VARINT;
        return 0;
    case WIRE_FIXED64:
    case WIRE_FIXED32:
        pb->remaining = (tag & 7) == WIRE_FIXED64 ? 8 : 4;
        pb->state = PB_SKIP;
        return fits(pb, pb->remaining) ? 0 : bad(err, pb->what, "a field overruns the list");
    case WIRE_BYTES:
        pb->state = PB_LENGTH;
        return 0;
    default:
        return bad(err, pb->what, "a field has an unsupported wire type");
    }
}

/* A length was read: enter the List, or skip or collect the field. */
static int on_length(struct kube_pb_list *pb, struct kube_error *err)
{
    uint64_t len = pb->varint;
    if (!fits(pb, len))
        return bad(err, pb->what, "a field overruns the list");
    if (pb->level == PB_ENVELOPE && pb->field == 2) {
        /* The List itself: entered, never buffered. Go writes the kind
         * first, and the items cannot be decoded without it. */
        if (pb->item_type == NULL)
            return bad(err, pb->what, "the list comes before its kind (TypeMeta)");
        pb->saw_list = true;
        pb->level = PB_LIST;
        pb->list_end = pb->offset + len;
        element_done(pb); /* an empty List ends at once */
        return 0;
    }
    bool wanted = pb->level == PB_LIST ? pb->field <= 2 : pb->field == 1 || pb->field == 3;
    pb->remaining = len;
    if (!wanted) {
        pb->state = PB_SKIP;
    } else if (len > pb->max_field) {
        /* Not "TooLarge": callers read that as "nothing was delivered,
         * ask again in pages", and items may have been handed on. */
        char why[128];
        snprintf(why, sizeof why, "a field of %llu bytes is over the bound of %zu bytes",
                 (unsigned long long)len, pb->max_field);
        return bad(err, pb->what, why);
    } else {
        pb->state = PB_FIELD;
        pb->buf_len = 0;
    }
    if (len > 0)
        return 0;
    int rc = pb->state == PB_FIELD ? handle_field(pb, (const uint8_t *)"", 0, err) : 0;
    element_done(pb);
    return rc;
}

/* One varint byte; *done when the varint is complete. */
static int varint_byte(struct kube_pb_list *pb, uint8_t byte, bool *done, struct kube_error *err)
{
    if (pb->varint_shift >= 64 || (pb->varint_shift == 63 && (byte & 0x7e) != 0))
        return bad(err, pb->what, "a varint is too long");
    pb->varint |= (uint64_t)(byte & 0x7f) << pb->varint_shift;
    pb->varint_shift += 7;
    *done = (byte & 0x80) == 0;
    return 0;
}

/* Collects (part of) a field from the chunk; handles it once complete.
 * A field lying whole in the chunk is handled in place, without a copy. */
static int collect(struct kube_pb_list *pb, const uint8_t *p, size_t n, size_t *used,
                   struct kube_error *err)
{
    size_t take = n < pb->remaining ? n : (size_t)pb->remaining;
    *used = take;
    pb->offset += take;
    if (pb->buf_len == 0 && take == pb->remaining) {
        pb->remaining = 0;
        int rc = handle_field(pb, p, take, err);
        element_done(pb);
        return rc;
    }
    if (pb->buf_len + pb->remaining > pb->buf_cap) {
        size_t cap = pb->buf_len + (size_t)pb->remaining; /* the field's exact size */
        char *grown = realloc(pb->buf, cap);
        if (grown == NULL)
            return kube_fail(err, 0, "InternalError", "LIST %s: out of memory", pb->what);
        pb->buf = grown;
        pb->buf_cap = cap;
        if (cap > pb->peak)
            pb->peak = cap;
    }
    memcpy(pb->buf + pb->buf_len, p, take);
    pb->buf_len += take;
    pb->remaining -= take;
    if (pb->remaining > 0)
        return 0;
    size_t len = pb->buf_len;
    pb->buf_len = 0;
    int rc = handle_field(pb, (const uint8_t *)pb->buf, len, err);
    element_done(pb);
    return rc;
}

int kube_pb_list_feed(struct kube_pb_list *pb, const char *data, size_t n, struct kube_error *err)
{
    const uint8_t *p = (const uint8_t *)data;
    while (n > 0) {
        size_t used = 1;
        bool done = false;
        switch (pb->state) {
        case PB_MAGIC:
            if (p[0] != magic[pb->offset])
                return bad(err, pb->what, "it does not start with \"k8s\\0\"");
            if (++pb->offset == sizeof magic) {
                pb->offset = 0;
                pb->state = PB_TAG;
            }
            break;
        case PB_TAG:
        case PB_LENGTH:
        case PB_SKIP_VARINT:
            if (pb->level == PB_LIST && pb->offset >= pb->list_end)
                return bad(err, pb->what, "a field overruns the list");
            if (varint_byte(pb, p[0], &done, err) != 0)
                return -1;
            pb->offset++;
            if (!done)
                break;
            enum pb_state was = pb->state;
            pb->varint_shift = 0;
            int rc = was == PB_TAG      ? on_tag(pb, err)
                     : was == PB_LENGTH ? on_length(pb, err)
                                        : (element_done(pb), 0);
            pb->varint = 0;
            if (rc != 0)
                return -1;
            break;
        case PB_SKIP:
            used = n < pb->remaining ? n : (size_t)pb->remaining;
            pb->remaining -= used;
            pb->offset += used;
            if (pb->remaining == 0)
                element_done(pb);
            break;
        case PB_FIELD:
            if (collect(pb, p, n, &used, err) != 0)
                return -1;
            break;
        }
        p += used;
        n -= used;
    }
    return 0;
}

enum kube_result kube_pb_list_finish(struct kube_pb_list *pb, char *rv, char **next,
                                     struct kube_error *err)
{
    *next = NULL;
    if (pb->state == PB_MAGIC)
        return bad(err, pb->what, "it does not start with \"k8s\\0\""), KUBE_ERROR;
    if (pb->state != PB_TAG || pb->varint_shift != 0 || pb->level != PB_ENVELOPE) {
        char why[128];
        snprintf(why, sizeof why, "truncated after %zu items (%llu bytes)", pb->items,
                 (unsigned long long)pb->offset + sizeof magic);
        return bad(err, pb->what, why), KUBE_ERROR;
    }
    if (pb->item_type == NULL)
        return bad(err, pb->what,
                   "unexpected kind \"\" (expected NodeList, PodList or "
                   "ConfigMapList)"),
               KUBE_ERROR;
    if (!pb->saw_list)
        return bad(err, pb->what, "the envelope holds no list"), KUBE_ERROR;
    if (rv != NULL && pb->rv[0] != '\0')
        snprintf(rv, KUBE_RV_MAX, "%s", pb->rv);
    *next = pb->cont; /* handed over */
    pb->cont = NULL;
    return KUBE_OK;
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
