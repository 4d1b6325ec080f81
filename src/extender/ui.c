/* ui.c -- the embedded /ui page (see ui.h). */
#include "ui.h"

#include "ui_page.h"

const char *ui_page(size_t *len)
{
    *len = ui_page_bytes_len;
    return (const char *)ui_page_bytes;
}
