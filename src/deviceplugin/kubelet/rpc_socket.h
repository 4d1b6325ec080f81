/* rpc_socket.h -- socket-path safety for the plugin's unix sockets.
 *
 * gRPC's core unlinks whatever file sits at a path before it binds, and
 * unlinks the path again when its server shuts down, whoever owns the file
 * by then. Either would take the socket away from a live process (a second
 * instance, or a newer one that replaced us). These functions never remove
 * a socket somebody answers on, and never remove one that is not ours.
 * No gRPC here: plain POSIX, testable on its own.
 *
 * Threads: none of its own; a struct rpc_socket belongs to one server. */
#ifndef GP_RPC_SOCKET_H
#define GP_RPC_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "compiler.h"

/* The socket file a server created, as recorded after it was bound. */
struct rpc_socket {
    char *path; /* owned */
    dev_t dev;
    ino_t ino;
    struct timespec ctime;
    bool have_identity; /* dev/ino/ctime were recorded */
};

/* Make `path` free for a new server: nothing there is fine; a socket file
 * nobody accepts on (a dead server's) is unlinked and logged. Refuses
 * (-1, err) a path too long for sun_path, a non-socket, and a socket a live
 * process answers on ("... is served by another live process"). */
GP_MUST_USE int rpc_socket_claim(const char *path, char *err, size_t errlen);

/* The name to bind instead of `path`: ".<name>.<pid>" in the same directory,
 * so that the core's unlink at shutdown hits only that name. `path` itself
 * when the private name would not fit in sun_path. */
void rpc_socket_private_name(const char *path, char *out, size_t outlen);

/* rename(2) the socket bound at bind_path onto path, atomically (no-op when
 * they are equal), and record the file's identity in *s. On failure the
 * bound name is unlinked. s->path must be set. */
GP_MUST_USE int rpc_socket_install(struct rpc_socket *s, const char *bind_path, char *err,
                                   size_t errlen);

/* Remove the socket file only if it is still the one recorded (device,
 * inode and ctime): a newer instance's socket, or one re-created after the
 * kubelet cleaned its directory, is left alone. Frees s->path. */
void rpc_socket_release(struct rpc_socket *s);

#endif
