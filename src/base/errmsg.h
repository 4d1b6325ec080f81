/* errmsg.h -- filling the caller-supplied error buffer.
 *
 * Fallible functions take `char *err, size_t errlen` and describe a failure
 * there (see compiler.h for the result convention). These helpers format
 * the message and return -1, so that an error path is one statement:
 *
 *     return gp_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
 *
 * The message is truncated to errlen - 1 bytes; errlen 0 writes nothing. */
#ifndef GP_ERRMSG_H
#define GP_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

/* The size of an error buffer (`char err[GP_ERR_LEN]`): room for a path,
 * a dlerror() text or a kube reason with its context. */
#define GP_ERR_LEN 512

/* Formats the message into err; returns -1. */
int gp_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "<path>:<line>: <message>" into err (input files: YAML, CSV); returns -1. */
int gp_verrf_at(char *err, size_t errlen, const char *path, unsigned long line, const char *fmt,
                va_list ap) __attribute__((format(printf, 5, 0)));

#endif
