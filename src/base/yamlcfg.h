/* yamlcfg.h -- a read-only walker over one YAML document (libyaml).
 *
 * The only module that includes <yaml.h>: config.c walks the tree through
 * these helpers, so the schema code never sees libyaml types. Every node
 * carries its 1-based source line for `file:line: what` messages.
 * Owner: ycfg_load() fills a struct ycfg_doc that ycfg_free() releases;
 * node pointers are valid until then. */
#ifndef GP_YAMLCFG_H
#define GP_YAMLCFG_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"

struct ycfg_doc {
    void *impl; /* yaml_document_t *, NULL when empty or not loaded */
};

struct ycfg_node; /* opaque: a node of the loaded document */

enum ycfg_kind { YCFG_NULL, YCFG_SCALAR, YCFG_SEQUENCE, YCFG_MAPPING };

/* Bounds of what ycfg_load() accepts: a ConfigMap holds at most 1 MiB, a
 * kubeconfig with many embedded certificates a few; nesting deeper than
 * any real configuration is refused because libyaml's time grows with its
 * square. */
#define YCFG_MAX_BYTES (4 * 1024 * 1024)
#define YCFG_MAX_DEPTH 64

/* Parses the first document of `path`, which must be a regular file (a
 * FIFO, device, socket or directory is refused at once, without blocking)
 * of at most YCFG_MAX_BYTES, nested at most YCFG_MAX_DEPTH levels; time is
 * linear in its size. An empty file is an empty document (ycfg_root()
 * returns NULL). Errors: "path:line: message" into err. */
GP_MUST_USE int ycfg_load(const char *path, struct ycfg_doc *doc, char *err, size_t errlen);
void ycfg_free(struct ycfg_doc *doc);

const struct ycfg_node *ycfg_root(const struct ycfg_doc *doc);
/* YCFG_NULL for plain "", "~", "null", "Null", "NULL" (YAML's null). */
enum ycfg_kind ycfg_kind(const struct ycfg_node *n);
const char *ycfg_kind_name(const struct ycfg_node *n); /* "a string", "a list", ... */
int ycfg_line(const struct ycfg_node *n);              /* 1-based */
/* Scalar text (NUL-terminated; "" for non-scalars). */
const char *ycfg_text(const struct ycfg_node *n);
/* True when the scalar was written quoted or as a block: YAML makes it a
 * string, never a bool or a number. */
bool ycfg_quoted(const struct ycfg_node *n);

/* Sequences and mappings: number of items / pairs, and item i. */
size_t ycfg_count(const struct ycfg_node *n);
const struct ycfg_node *ycfg_item(const struct ycfg_doc *doc, const struct ycfg_node *seq,
                                  size_t i);
void ycfg_pair(const struct ycfg_doc *doc, const struct ycfg_node *map, size_t i,
               const struct ycfg_node **key, const struct ycfg_node **value);

#endif
