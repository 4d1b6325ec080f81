"""Holds a server's connection table the way the reliability review's probes did
(d4b, d11b): COUNT idle connections from each of several source addresses, each
reopened as soon as the server closes it. Optionally every connection trickles a
partial request (a request line, then a header line every second), slowloris style.

Each connection sends a first line as soon as it is connected: an empty line
(which HTTP servers skip before a request) when idle. A burst of connections
overflows the server's SYN queue, and the kernel then answers with SYN cookies:
such a connection exists on the server only once its first data segment arrives
(TCP sends that again until it does), so a connection that never sends a byte
would hold nothing there.

Run as a separate process so that its loop does not compete with the test's own
client for one interpreter lock:

    conn_flood.py HOST PORT COUNT SOURCE... [--trickle]

Prints "held N" once every connection is open (flushed), then runs until stdin
closes, and prints "open N reopened M" on exit. Tests use the Flood context
manager below.
"""

import errno
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time


def raise_descriptor_limit(want):
    """Raises this process's soft RLIMIT_NOFILE to want, if lower: a server started
    afterwards inherits it (a flood of 1,152 connections needs more than the 1,024
    many shells default to)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            raise RuntimeError("the descriptor limit is %d, this test needs %d" % (hard, want))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def accepted(pid, port):
    """How many TCP connections to port process pid has accepted and holds open, but
    for those from 127.0.0.1 (the test's own client): the sockets among its
    descriptors that /proc/net/tcp lists with that local port."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    with open("/proc/%d/net/tcp" % pid) as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            remote = fields[2].split(":")[0]
            if local_port == port and fields[3] != "0A" and remote != "0100007F" and fields[9] in inodes:
                n += 1
    return n


def wait_until_accepted(pid, port, want, timeout):
    """Waits until process pid holds want flood connections on port (SYNs that a
    full backlog dropped are sent again after 1 s, then 2 s later); returns how many
    it holds."""
    end = time.monotonic() + timeout
    while True:
        n = accepted(pid, port)
        if n >= want or time.monotonic() > end:
            return n
        time.sleep(0.05)


class Flood:
    """with Flood(port, count, sources) as f: ... -- the flood runs inside the block;
    afterwards f.reopened says how many connections the server closed meanwhile."""

    def __init__(self, port, count, sources, trickle=False, host="127.0.0.1"):
        self.argv = [sys.executable, os.path.abspath(__file__), host, str(port), str(count)] + \
            list(sources) + (["--trickle"] if trickle else [])
        self.reopened = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("held"):
            self.proc.kill()
            raise RuntimeError("conn_flood did not start: %r" % line)
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        out = self.proc.stdout.read().split()
        self.proc.wait(30)
        self.reopened = int(out[3]) if len(out) == 4 else None
        return False


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    trickle = "--trickle" in sys.argv
    host, port, count, sources = args[0], int(args[1]), int(args[2]), args[3:]
    raise_descriptor_limit(count * len(sources) + 64)
    sel = selectors.DefaultSelector()
    reopened = 0

    def open_one(source):
        s = socket.socket()
        s.setblocking(False)
        s.bind((source, 0))
        err = s.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            return None
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, {"source": source, "line": False})
        return s

    socks = [open_one(src) for src in sources for _ in range(count)]
    held = sum(1 for s in socks if s is not None)
    print("held %d" % held, flush=True)

    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    next_line = time.monotonic()
    while not done.is_set():
        for key, events in sel.select(timeout=0.1):
            s, source = key.fileobj, key.data["source"]
            if events & selectors.EVENT_WRITE:  # connected (or failed: the read below says)
                try:
                    s.send(b"GET / HTTP/1.1\r\n" if trickle else b"\r\n")
                    key.data["line"] = True
                except OSError:
                    pass
                sel.modify(s, selectors.EVENT_READ, key.data)
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                continue  # an answer to a trickled request cannot come; ignore
            sel.unregister(s)
            s.close()
            reopened += 1
            while open_one(source) is None and not done.is_set():
                time.sleep(0.01)
        if trickle and time.monotonic() >= next_line:
            next_line = time.monotonic() + 1
            for key in list(sel.get_map().values()):
                if key.data["line"]:
                    try:
                        key.fileobj.send(b"X-Slow: y\r\n")
                    except OSError:
                        pass  # closing: the selector reports the end
    print("open %d reopened %d" % (len(sel.get_map()), reopened), flush=True)


if __name__ == "__main__":
    main()
