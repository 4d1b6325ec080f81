/* fuzz_kube_watch.c -- watch event framing: the line splitter watch.c feeds
 * (kube_lines_feed, chunk size from byte 0, a small line cap from byte 1 so
 * the too-large path is reached), each line decoded as watch.c decodes an
 * event ({"type", "object"}; an ERROR's Status through
 * kube_error_from_status), and the same bytes through kube_base64_decode
 * (kubeconfig *-data fields). watch.c's own per-line function is static
 * and reached only through libcurl; this drives the same library calls. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "wire.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_line(const char *line, size_t len, void *ctx)
{
    size_t *lines = ctx;
    if (len == 0 || memchr(line, '\n', len))
        abort(); /* the contract: complete, non-empty lines without "\n" */
    ++*lines;
    json_error_t jerr;
    json_t *event = json_loadb(line, len, 0, &jerr);
    if (!event)
        return 0;
    const char *type = json_string_value(json_object_get(event, "type"));
    json_t *object = json_object_get(event, "object");
    if (json_is_object(object) && type && strcmp(type, "ERROR") == 0) {
        struct kube_error err = {0};
        (void)kube_error_from_status(&err, object);
        if (!memchr(err.message, '\0', sizeof(err.message)))
            abort();
    }
    json_decref(event);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (size < 2)
        return 0;
    size_t chunk = (size_t)data[0] % 17 + 1;
    size_t cap = (size_t)data[1] * 16 + 1;
    const char *p = (const char *)data + 2;
    size_t n = size - 2;
    struct kube_lines lines;
    size_t count = 0;
    bool too_large = false;
    kube_lines_init(&lines, cap);
    for (size_t off = 0; off < n; off += chunk) {
        if (kube_lines_feed(&lines, p + off, n - off < chunk ? n - off : chunk, on_line, &count,
                            &too_large) != 0)
            break;
        if (lines.len > cap)
            abort(); /* at most max bytes of an unfinished line */
    }
    (void)kube_lines_pending(&lines);
    kube_lines_free(&lines);

    unsigned char *out;
    size_t outlen;
    if (kube_base64_decode(p, n, &out, &outlen) == 0) {
        if (outlen > n)
            abort();
        free(out);
    }
    return 0;
}
