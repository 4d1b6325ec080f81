/* yamlcfg.c -- see yamlcfg.h. */
#include "yamlcfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* The opaque node type is libyaml's node; the cast is the whole adapter. */
static const yaml_node_t *raw(const struct ycfg_node *n)
{
    return (const yaml_node_t *)(const void *)n;
}

static const struct ycfg_node *wrap(const yaml_node_t *n)
{
    return (const struct ycfg_node *)(const void *)n;
}

/* Reads a regular file of at most YCFG_MAX_BYTES into a malloc'ed buffer.
 * O_NONBLOCK: opening a FIFO without a writer (or a device) must not block;
 * everything that is not a regular file is refused before any read. */
static char *read_config(const char *path, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open config file: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot read config file: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: cannot read config file: it is %s", path,
                 S_ISDIR(st.st_mode)    ? "a directory"
                 : S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file"
                 : S_ISSOCK(st.st_mode) ? "a socket, not a regular file"
                                        : "a device, not a regular file");
        close(fd);
        return NULL;
    }
    /* st_size is only a hint (files under /proc say 0): read up to the cap + 1. */
    size_t cap = (size_t)YCFG_MAX_BYTES + 1, n = 0;
    char *text = malloc(cap);
    if (text == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        close(fd);
        return NULL;
    }
    while (n < cap) {
        ssize_t r = read(fd, text + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: cannot read config file: %s", path, strerror(errno));
            free(text);
            close(fd);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n > YCFG_MAX_BYTES) {
        snprintf(err, errlen, "%s: config file larger than %d bytes", path, YCFG_MAX_BYTES);
        free(text);
        return NULL;
    }
    *len = n;
    return text;
}

static void parse_error(const yaml_parser_t *parser, const char *path, char *err, size_t errlen)
{
    if (parser->error == YAML_READER_ERROR) /* encoding errors carry no line */
        snprintf(err, errlen, "%s: invalid YAML: %s at byte %zu", path,
                 parser->problem ? parser->problem : "input error", parser->problem_offset);
    else if (parser->error == YAML_MEMORY_ERROR)
        snprintf(err, errlen, "%s: out of memory parsing YAML", path);
    else /* libyaml's marks are 0-based; editors count from 1. */
        snprintf(err, errlen, "%s:%zu: invalid YAML: %s%s%s", path, parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "syntax error", parser->context ? " " : "",
                 parser->context ? parser->context : "");
}

/* libyaml's scanner does work proportional to the flow depth for every
 * token, so a deep document costs depth^2 (40,000 levels: 7 s). Its events
 * come while it scans: stopping at the first node deeper than
 * YCFG_MAX_DEPTH keeps the whole load linear in the file's size. */
static int check_depth(const char *text, size_t len, const char *path, char *err, size_t errlen)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (bool done = false; !done;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            parse_error(&parser, path, err, errlen);
            rc = -1;
            break;
        }
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
            if (++depth > YCFG_MAX_DEPTH) {
                snprintf(err, errlen, "%s:%zu: invalid YAML: nested deeper than %d levels", path,
                         ev.start_mark.line + 1, YCFG_MAX_DEPTH);
                rc = -1;
                done = true;
            }
        } else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (ev.type == YAML_STREAM_END_EVENT || ev.type == YAML_DOCUMENT_END_EVENT) {
            done = true; /* only the first document is loaded */
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

int ycfg_load(const char *path, struct ycfg_doc *doc, char *err, size_t errlen)
{
    doc->impl = NULL;
    size_t len = 0;
    char *text = read_config(path, &len, err, errlen);
    if (text == NULL)
        return -1;
    if (check_depth(text, len, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_document_t *d = malloc(sizeof *d);
    int rc = 0;
    if (d == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
    } else if (!yaml_parser_load(&parser, d)) {
        parse_error(&parser, path, err, errlen);
        free(d);
        rc = -1;
    } else {
        doc->impl = d;
    }
    yaml_parser_delete(&parser);
    free(text);
    return rc;
}

void ycfg_free(struct ycfg_doc *doc)
{
    if (doc->impl != NULL) {
        yaml_document_delete(doc->impl);
        free(doc->impl);
        doc->impl = NULL;
    }
}

const struct ycfg_node *ycfg_root(const struct ycfg_doc *doc)
{
    if (doc->impl == NULL)
        return NULL;
    return wrap(yaml_document_get_root_node(doc->impl));
}

static bool is_null_text(const char *s)
{
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

enum ycfg_kind ycfg_kind(const struct ycfg_node *n)
{
    const yaml_node_t *y = raw(n);
    switch (y->type) {
    case YAML_SEQUENCE_NODE:
        return YCFG_SEQUENCE;
    case YAML_MAPPING_NODE:
        return YCFG_MAPPING;
    case YAML_SCALAR_NODE:
        if (y->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            is_null_text((const char *)y->data.scalar.value))
            return YCFG_NULL;
        return YCFG_SCALAR;
    default:
        return YCFG_NULL;
    }
}

const char *ycfg_kind_name(const struct ycfg_node *n)
{
    switch (ycfg_kind(n)) {
    case YCFG_SEQUENCE:
        return "a list";
    case YCFG_MAPPING:
        return "a mapping";
    case YCFG_NULL:
        return "null";
    case YCFG_SCALAR:
        break;
    }
    return ycfg_quoted(n) ? "a string" : "a scalar";
}

int ycfg_line(const struct ycfg_node *n)
{
    return (int)raw(n)->start_mark.line + 1;
}

const char *ycfg_text(const struct ycfg_node *n)
{
    const yaml_node_t *y = raw(n);
    return y->type == YAML_SCALAR_NODE ? (const char *)y->data.scalar.value : "";
}

bool ycfg_quoted(const struct ycfg_node *n)
{
    const yaml_node_t *y = raw(n);
    return y->type == YAML_SCALAR_NODE && y->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
}

size_t ycfg_count(const struct ycfg_node *n)
{
    const yaml_node_t *y = raw(n);
    if (y->type == YAML_SEQUENCE_NODE)
        return (size_t)(y->data.sequence.items.top - y->data.sequence.items.start);
    if (y->type == YAML_MAPPING_NODE)
        return (size_t)(y->data.mapping.pairs.top - y->data.mapping.pairs.start);
    return 0;
}

const struct ycfg_node *ycfg_item(const struct ycfg_doc *doc, const struct ycfg_node *seq, size_t i)
{
    int id = raw(seq)->data.sequence.items.start[i];
    return wrap(yaml_document_get_node(doc->impl, id));
}

void ycfg_pair(const struct ycfg_doc *doc, const struct ycfg_node *map, size_t i,
               const struct ycfg_node **key, const struct ycfg_node **value)
{
    const yaml_node_pair_t *p = &raw(map)->data.mapping.pairs.start[i];
    *key = wrap(yaml_document_get_node(doc->impl, p->key));
    *value = wrap(yaml_document_get_node(doc->impl, p->value));
}
