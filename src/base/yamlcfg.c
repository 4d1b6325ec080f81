/* yamlcfg.c -- see yamlcfg.h. */
#include "yamlcfg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int ycfg_load(const char *path, struct ycfg_doc *doc, char *err, size_t errlen)
{
    doc->impl = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open config file: %s", path, strerror(errno));
        return -1;
    }
    /* fopen() accepts a directory; say so instead of libyaml's "input error". */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        snprintf(err, errlen, "%s: cannot read config file: it is a directory", path);
        return -1;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    yaml_parser_set_input_file(&parser, f);
    yaml_document_t *d = malloc(sizeof *d);
    int rc = 0;
    if (d == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
    } else if (!yaml_parser_load(&parser, d)) {
        if (parser.error == YAML_READER_ERROR) /* encoding errors carry no line */
            snprintf(err, errlen, "%s: invalid YAML: %s at byte %zu", path,
                     parser.problem ? parser.problem : "input error", parser.problem_offset);
        else /* libyaml's marks are 0-based; editors count from 1. */
            snprintf(err, errlen, "%s:%zu: invalid YAML: %s%s%s", path,
                     parser.problem_mark.line + 1, parser.problem ? parser.problem : "syntax error",
                     parser.context ? " " : "", parser.context ? parser.context : "");
        free(d);
        rc = -1;
    } else {
        doc->impl = d;
    }
    yaml_parser_delete(&parser);
    fclose(f);
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
