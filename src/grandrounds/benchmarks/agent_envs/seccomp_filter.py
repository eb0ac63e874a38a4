"""The seccomp filter bubblewrap loads into each sandbox (``bwrap --seccomp FD``), before the
model's program starts: system calls that reach the kernel's less-travelled surfaces are refused
with an error, everything else is allowed.

The namespaces of :mod:`grandrounds.benchmarks.agent_envs.sandbox` already take away the files,
the processes, the network and every capability; what they leave is the kernel itself, shared with
the machine. This filter narrows that: the calls below are where sandbox escapes through the kernel
have come from (new namespaces, kernel keyrings, BPF, io_uring, perf events, userfaultfd,
ptrace and cross-process memory, module loading, pushing input into a terminal), and the program
of a model answering a question has no use for any of them. The list follows what Flatpak's
sandbox (``flatpak-run.c``, ``setup_seccomp``) and Docker's default seccomp profile refuse to
unprivileged programs.

A call refused returns ``EPERM`` (``clone3``: ``ENOSYS``, so the C library falls back to
``clone``, whose flags the filter can read; a socket of another family than Unix, IPv4 or IPv6:
``EAFNOSUPPORT``), so a program sees an ordinary error rather than being killed. System calls of
another architecture's table (a 32-bit call from a 64-bit program) kill the process: that is
libseccomp's default for a foreign architecture.

The filter is compiled with libseccomp (through ``pyseccomp``) once per process, as the classic
BPF program ``seccomp_export_bpf`` writes and bubblewrap reads.
"""

from __future__ import annotations

import errno
import functools
import tempfile
from typing import Any

#: Refused with EPERM: namespaces and mounts, keyrings, BPF and perf, io_uring, userfaultfd,
#: tracing and other processes' memory, kernel modules and kexec, clocks, swap, reboot, and the
#: memory-policy, handle and accounting calls Flatpak refuses.
REFUSED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "add_key",
    "keyctl",
    "request_key",
    "bpf",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "quotactl",
    "acct",
    "syslog",
    "uselib",
    "modify_ldt",
    "iopl",
    "ioperm",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "fanotify_init",
    "move_pages",
    "mbind",
    "get_mempolicy",
    "set_mempolicy",
    "migrate_pages",
)

#: ``clone``/``ioctl`` arguments refused (linux/sched.h, asm-generic/ioctls.h).
CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
#: Socket families a program may open (linux/socket.h): Unix, IPv4, IPv6. The sandbox has no
#: network either way; the rest (netlink, packet, vsock, ...) are kernel surface only.
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10


class FilterUnavailable(Exception):
    """libseccomp (or its Python binding) is not here; the one-line reason."""


def _rules(seccomp: Any) -> Any:
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in REFUSED:
        try:
            f.add_rule(eperm, name)
        except (OSError, ValueError):  # not a system call of this architecture (e.g. iopl on arm64)
            continue
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    for request in (TIOCSTI, TIOCLINUX):
        f.add_rule(eperm, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    refused_family = seccomp.ERRNO(errno.EAFNOSUPPORT)
    for family in range(0, AF_INET6):
        if family not in (AF_UNIX, AF_INET):
            f.add_rule(refused_family, "socket", seccomp.Arg(0, seccomp.EQ, family))
    f.add_rule(refused_family, "socket", seccomp.Arg(0, seccomp.GT, AF_INET6))
    return f


@functools.cache
def program() -> bytes:
    """The compiled filter (classic BPF, as bubblewrap's ``--seccomp`` reads it); raises
    :class:`FilterUnavailable` with the reason where libseccomp cannot be loaded."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as e:
        raise FilterUnavailable(
            f"libseccomp cannot be loaded ({type(e).__name__}: {e}); install libseccomp2 "
            "(Debian, Ubuntu) or libseccomp (Fedora, Arch) and the pyseccomp package"
        ) from None
    with tempfile.TemporaryFile() as out:
        _rules(pyseccomp).export_bpf(out)
        out.seek(0)
        return out.read()


def describe() -> str:
    """What the sandbox records about the filter: how many system calls it refuses, or why none."""
    try:
        program()
    except FilterUnavailable as e:
        return f"off: {e}"
    return f"on: {len(REFUSED) + 1} system calls refused, and clone of a user namespace, TIOCSTI/TIOCLINUX, sockets but Unix/IPv4/IPv6"
