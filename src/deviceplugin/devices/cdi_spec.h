/* cdi_spec.h -- a CDI spec file from devices and their container edits.
 *
 * A Container Device Interface spec names devices of one kind
 * ("vendor/class"); a runtime given "vendor/class=name" applies the
 * spec's common containerEdits and that device's. This builder knows no
 * vendor: the device plugin's node-wide spec (cdi.h) and a DRA driver's
 * per-claim specs are both a list of (name, edits) plus common edits.
 *
 * Encoding (CDI 0.5.0): env as "KEY=VALUE" strings; deviceNodes {path,
 * hostPath[, permissions]}; mounts {hostPath, containerPath, options} with
 * options ro|rw, nosuid, nodev, bind; hooks {hookName, path, args}. Empty
 * lists are left out. CDI device names are not part of a spec (they are
 * what names it) and are ignored here.
 *
 * Errors: -1 / NULL + err naming the path or the reason. Thread-safe
 * (no state). */
#ifndef GP_CDI_SPEC_H
#define GP_CDI_SPEC_H

#include <stddef.h>

#include "compiler.h"
#include "container_edits.h"

#define CDI_SPEC_VERSION "0.5.0"

struct cdi_spec_device {
    const char *name;                    /* the part after "=" */
    const struct container_edits *edits; /* its own edits (NULL: none) */
};

struct cdi_spec {
    const char *kind; /* "vendor/class", e.g. "k8s.device-plugin.nvidia.com/gpu" */
    const struct cdi_spec_device *devices;
    size_t device_count;
    const struct container_edits *common; /* every device's; NULL: none */
};

/* The spec as JSON text ending in a newline, malloc'd (the caller frees
 * it). NULL + err when kind is not "vendor/class", a device has no name,
 * two devices share a name, or out of memory. */
GP_MUST_USE char *cdi_spec_json(const struct cdi_spec *spec, char *err, size_t errlen);

/* Writes the spec to <dir>/<file_name> (dir created if missing, mode
 * 0755): replaced whole and synced (file_replace), so a runtime reads the
 * old spec or the new one, never a part. file_name is a plain name ending
 * in ".json" (CDI reads *.json and *.yaml). 0 or -1 + err. */
GP_MUST_USE int cdi_spec_write(const struct cdi_spec *spec, const char *dir, const char *file_name,
                               char *err, size_t errlen);

/* Removes <dir>/<file_name>; a file already gone is not an error. 0 or
 * -1 + err. */
GP_MUST_USE int cdi_spec_remove(const char *dir, const char *file_name, char *err, size_t errlen);

#endif
