"""gdb script (gdb -batch -p PID -x this): stops the extender on the path
from a Binding's deadline check to its send, one point per bind, for
FENCE_PAUSE_S seconds each (test_extender_fence.py, N2).

For each point of FENCE_POINTS (comma-separated) in turn:
  1. say ARMED, then wait for a thread to enter kube_bind_pod (the bind thread, T);
  2. wait for T's deadline check: clock_now_ns called from perform_once,
     then let it return ("finish"): T is now just past the check;
  3. the point "after-check" stops here; any other names a function
     (libcurl's, libc's or the client's own) whose next call on T is the
     point. A send() on T before it means the point is not on the path:
     reported, not paused;
  4. the whole process stays stopped (all-stop mode) for FENCE_PAUSE_S,
     then runs on.
Lines starting "FENCE " on stdout tell the test what happened, with
time.time() stamps.
"""
import os
import time

import gdb

PAUSE_S = float(os.environ["FENCE_PAUSE_S"])
POINTS = os.environ["FENCE_POINTS"].split(",")


def say(*words):
    print("FENCE", *words, flush=True)


class Bp(gdb.Breakpoint):
    """A breakpoint that remembers the hits run_until has seen."""

    def __init__(self, spec):
        super().__init__(spec, internal=True)
        self.seen = 0


class CalledFrom(Bp):
    """Stops only when the function's caller is `caller` (inlined or not)."""

    def __init__(self, spec, caller):
        super().__init__(spec)
        self.caller = caller

    def stop(self):
        older = gdb.newest_frame().older()
        return older is not None and older.name() == self.caller


def thread_num():
    return gdb.selected_thread().num


def run_until(bps):
    """continue until one of bps stops the process; that breakpoint."""
    while True:
        gdb.execute("continue", to_string=True)
        for bp in bps:
            if bp.is_valid() and bp.hit_count > bp.seen:
                bp.seen = bp.hit_count
                return bp


def breakpoint(spec, thread=None):
    bp = Bp(spec)
    if thread is not None:
        bp.thread = thread
    return bp


def main():
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    gdb.execute("set breakpoint pending on")
    gdb.execute("handle SIGPIPE nostop noprint pass")
    for point in POINTS:
        arm = breakpoint("kube_bind_pod")
        say("ARMED", point)  # the test sends its bind from here on
        run_until([arm])
        t = thread_num()
        arm.delete()
        check = CalledFrom("clock_now_ns", "perform_once")
        check.thread = t
        run_until([check])
        check.delete()
        gdb.execute("finish", to_string=True)  # T has read the clock for its check
        if point != "after-check":
            target = breakpoint(point, t)
            send = breakpoint("send", t)
            hit = run_until([target, send])
            target.delete()
            send.delete()
            if hit is send:
                say("NOT-ON-PATH", point)
                continue
        say("PAUSED", point, "%.6f" % time.time())
        time.sleep(PAUSE_S)
        say("RESUMED", point, "%.6f" % time.time())
    gdb.execute("detach")
    say("DETACHED")


main()
