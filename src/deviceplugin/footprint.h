/* footprint.h -- keep the resident set to what the daemon really uses.
 *
 * Nearly all of the plugin's RSS is clean, file-backed program text (gRPC
 * and abseil are linked in). The kernel's fault-around maps up to 64 KiB
 * of neighbouring text on every page fault, most of which the daemon never
 * executes, and start-up code runs once. footprint_trim_text() drops the
 * mappings of text pages (and advises random access, which stops
 * read-ahead), so afterwards only pages actually executed again are mapped. Text is never written, so nothing is lost: a dropped page is
 * mapped again from the page cache on its next use. Data, relocated and
 * writable mappings are never touched. Call from one thread, after start-up. */
#ifndef GP_FOOTPRINT_H
#define GP_FOOTPRINT_H

/* Returns the number of text mappings advised, or -1 if /proc/self/maps
 * could not be read. */
int footprint_trim_text(void);

#endif
