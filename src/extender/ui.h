/* ui.h -- the /ui page: one self-contained HTML document (inline CSS and
 * JavaScript, no external URL), compiled into the binary from
 * src/extender/ui/index.html. It polls /ui/pool.json (pool_view.h).
 * The bytes are static: never freed, never modified. */
#ifndef GP_EXTENDER_UI_H
#define GP_EXTENDER_UI_H

#include <stddef.h>

const char *ui_page(size_t *len);

#endif
