"""The seccomp filter of the Landlock tier, built with libseccomp's Python bindings.

Landlock confines files, TCP ports, signals and abstract sockets; this filter takes away what
it does not cover (libseccomp's official bindings, ``seccomp``, where the Python that grades
has them, e.g. Debian's ``python3-seccomp``; else PyPI's ``pyseccomp``, the same API over the
same ``libseccomp.so``):

* **sockets of any family but AF_UNIX** (the kernel's own sockets are Unix sockets) and
  netlink's routing family (listing the interfaces, as zmq does): no network, not even
  loopback. ``socket()`` fails with EAFNOSUPPORT;
* **another process's memory and the kernel's own machinery**: ptrace, process_vm_readv/writev,
  mount and the new mount API, unshare, setns and clone with namespace flags (clone3, whose
  flags seccomp cannot read, says ENOSYS, so libc falls back to clone), keyctl, bpf,
  perf_event_open, userfaultfd, io_uring (it opens sockets past this filter), module and kexec
  loading, reboot, swap, clock setting, open_by_handle_at;
* **leaving the process group**: setsid and setpgid do nothing (they return 0): every process
  the sandbox starts, detached or not, stays in the group that ``timeout`` and jupyter_client
  kill when the kernel ends, so nothing outlives it to rewrite what nbgrader wrote.
"""

from __future__ import annotations

import errno
import socket

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount", "umount2", "pivot_root", "chroot",
          "unshare", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "fsopen", "fsconfig", "fsmount", "fspick",
          "move_mount", "open_tree", "mount_setattr", "open_by_handle_at", "name_to_handle_at", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
          "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "acct", "quotactl",
          "quotactl_fd", "vhangup", "iopl", "ioperm", "lookup_dcookie")
KEEP_GROUP = ("setsid", "setpgid")
# clone(2)'s namespace flags (linux/sched.h), by namespace: a clone asking for any is refused
NAMESPACE_FLAGS = {"mount": 0x00020000, "cgroup": 0x02000000, "uts": 0x04000000, "ipc": 0x08000000,
                   "user": 0x10000000, "pid": 0x20000000, "net": 0x40000000}


def bindings():
    """libseccomp's Python bindings: the official ones if this Python has them, else pyseccomp."""
    try:
        import seccomp
    except ImportError:
        import pyseccomp as seccomp
    return seccomp


def build():
    """The filter (not loaded): everything allowed but what the module docstring lists."""
    sc = bindings()
    f = sc.SyscallFilter(sc.ALLOW)
    # Unix sockets; and netlink's routing family, read-only without capabilities (getifaddrs: zmq
    # lists the interfaces before it tries, and fails, to bind ipykernel's 127.0.0.1 pipe)
    no_family = sc.ERRNO(errno.EAFNOSUPPORT)
    f.add_rule(no_family, "socket", sc.Arg(0, sc.GT, socket.AF_NETLINK))
    for family in range(socket.AF_NETLINK):      # libseccomp compares an argument once per rule
        if family != socket.AF_UNIX:
            f.add_rule(no_family, "socket", sc.Arg(0, sc.EQ, family))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, socket.AF_NETLINK),
               sc.Arg(2, sc.NE, 0))     # NETLINK_ROUTE
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in NAMESPACE_FLAGS.values():
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (OSError, RuntimeError, ValueError):   # a call this architecture or libseccomp does not know
            pass
    for name in KEEP_GROUP:
        f.add_rule(sc.ERRNO(0), name)
    return f


def load() -> None:
    """Load the filter on this process (no_new_privs must be set: Landlock's restrict does)."""
    build().load()
