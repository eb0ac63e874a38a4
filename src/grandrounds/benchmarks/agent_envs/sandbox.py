"""Model-written Python, run in a sandbox the operating system enforces, never in the harness.

The sandbox is **bubblewrap** (``bwrap``, the tool Flatpak is built on): each program runs in
fresh namespaces of its own (``--unshare-all``: user, mount, PID, network, IPC, UTS, cgroup),
where the file system holds only

- the Python interpreter and its standard library, read-only (its ``site-packages`` hidden
  under an empty read-only folder; no virtual environment, no package of the harness),
- the system's shared-library folders the interpreter loads, read-only,
- a minimal ``/dev`` (null, zero, random, ...), and
- a private tmpfs of ``Limits.disk_mb`` at ``/sandbox``, the working folder and the only
  writable place.

There is no ``/proc``, no ``/etc``, no home folder, no network interface but a loopback that is
down, no process of the harness's to see or signal, no environment but ``LANG`` and
``PYTHONHASHSEED=0`` (so that the same code prints the same output on a replay), no capability,
no further user namespace (``--disable-userns``), a session of its own (``--new-session``: no
terminal to push input into), and the sandbox dies with the harness (``--die-with-parent``).
Resource limits are kept (CPU seconds, address space, file size, open files, no core dumps, no
new processes). Past the wall-clock limit the whole sandbox is killed (its PID namespace goes with
its first process). Output is read as it comes and the program is killed once it passes the
limit, so the harness never holds more than the limit. The tmpfs is memory of the sandbox's own:
nothing is left on disk to clean up.

The audit hook of ``sandbox_child.py`` (PEP 578) stays as a second layer; it is not a sandbox
on its own (PEP 578 says so) and is never the only one unless a user asks for it by name:
:data:`UNSAFE` (``--param sandbox=unsafe-audit-hook-only``) runs the program in a plain child
process under the hook and the limits only, and the result records that it did. Where
bubblewrap is missing or cannot start (user namespaces refused), :func:`check` raises
:class:`SandboxUnavailable` with one line saying what is missing and how to install it; the
Python tool is then refused before its first call.

Inside, bubblewrap loads a seccomp filter before the program starts
(:mod:`grandrounds.benchmarks.agent_envs.seccomp_filter`): the kernel calls a sandbox escape would
need (new namespaces, keyrings, BPF, io_uring, ptrace, ...) return an error. Where libseccomp
cannot be loaded the namespaces still hold and the run records the filter as off (:func:`check`).

This module uses the standard library only (the filter's module loads libseccomp's binding).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("sandbox_child.py")
BUBBLEWRAP = "bubblewrap"
#: The bubblewrap program, looked up on PATH.
BWRAP = "bwrap"
UNSAFE = "unsafe-audit-hook-only"
BACKENDS = (BUBBLEWRAP, UNSAFE)
#: The working folder inside the sandbox (a tmpfs of ``Limits.disk_mb``).
WORKDIR = "/sandbox"
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap) and allow unprivileged user namespaces, or pass --param "
    f"sandbox={UNSAFE} to run model code under the audit hook only (not a sandbox)"
)
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


class SandboxUnavailable(RuntimeError):
    """No sandbox can start here; the message is one line: what is missing, how to install it."""


@dataclass(frozen=True)
class Limits:
    """What one run of model code may use."""

    seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 512
    file_mb: int = 8
    output_chars: int = 8000
    disk_mb: int = 64


@dataclass
class Outcome:
    """What the code printed, how it ended, and what the sandbox refused."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    refused: list[str] = field(default_factory=list)
    output_cut: bool = False
    cleanup_error: str | None = None

    def text(self) -> str:
        """The tool result the model sees: output, errors, and why it stopped where it did."""
        parts = [self.stdout.rstrip("\n")] if self.stdout.strip() else []
        err = "\n".join(
            line for line in self.stderr.splitlines() if not line.startswith("SANDBOX-REFUSED")
        )
        if err.strip():
            parts.append(f"[stderr]\n{err.strip()}")
        if self.output_cut:
            parts.append("[stopped: the output limit was reached]")
        elif self.timed_out:
            parts.append("[stopped: the time limit was reached]")
        elif self.exit_code not in (0, None):
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) or "[no output]"


# ---- bubblewrap ------------------------------------------------------------------------------
def _interpreter() -> str:
    """The base interpreter (a virtual environment's python is a link to it, or a copy)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _stdlib() -> str:
    return os.path.realpath(os.path.dirname(os.__file__))


def _library_binds() -> list[str]:
    """The shared-library folders, read-only; merged-/usr links kept as links."""
    args: list[str] = []
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib64", "/usr/lib32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    arch = getattr(sys.implementation, "_multiarch", "") or ""
    usr = f"/usr/lib/{arch}" if arch and os.path.isdir(f"/usr/lib/{arch}") else "/usr/lib"
    return [*args, "--ro-bind", usr, usr]


def bubblewrap_command(
    limits: Limits, bwrap: str = "bwrap", seccomp_fd: int | None = None, program: str | None = None
) -> list[str]:
    """The ``bwrap`` command line that runs the sandbox's child program under ``limits``, with the
    seccomp filter read from ``seccomp_fd`` where given. ``program`` replaces the child (with its
    audit hook) by other Python code: the tests of the operating system's layers alone use it."""
    exe, stdlib = _interpreter(), _stdlib()
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONHASHSEED",
        "0",
        "--uid",
        "65534",
        "--gid",
        "65534",
        *_library_binds(),
        "--ro-bind",
        exe,
        exe,
        "--ro-bind",
        stdlib,
        stdlib,
    ]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        lib = os.path.join(
            str(sysconfig.get_config_var("LIBDIR") or ""),
            str(sysconfig.get_config_var("INSTSONAME") or ""),
        )
        if os.path.isfile(lib) and not lib.startswith("/usr/lib/"):
            args += ["--ro-bind", lib, lib]
    for packages in (os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages")):
        if os.path.isdir(packages):  # the interpreter's own packages: hidden under an empty folder
            args += ["--size", "4096", "--tmpfs", packages, "--remount-ro", packages]
    args += [
        "--dev",
        "/dev",
        "--size",
        str(limits.disk_mb * 2**20),
        "--tmpfs",
        WORKDIR,
        "--chdir",
        WORKDIR,
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        "--",
        exe,
        "-s",  # no user site, no site packages, no bytecode, not the working folder on the path;
        "-S",  # not -I: it would ignore PYTHONHASHSEED (there is no other variable in there)
        "-B",
        "-P",
        "-c",
        CHILD.read_text(encoding="utf-8") if program is None else program,
    ]
    return args


def _seccomp() -> Any:
    """The seccomp filter's module; where this file runs on its own (copied with its siblings,
    as the escape tests run it), the sibling file."""
    try:
        from grandrounds.benchmarks.agent_envs import seccomp_filter
    except ImportError:
        import importlib.util

        name = "grandrounds_seccomp_filter"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, Path(__file__).with_name("seccomp_filter.py")
            )
            assert spec is not None and spec.loader is not None
            module = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        return sys.modules[name]
    return seccomp_filter


def seccomp_state() -> str:
    """``on: ...`` (what the filter refuses) or ``off: why`` (libseccomp cannot be loaded here)."""
    return str(_seccomp().describe())


def _filter_fd() -> int | None:
    """A pipe's read end holding the compiled seccomp filter for one sandbox (None where libseccomp
    is not here: the namespaces still hold, and the run records that the filter was off)."""
    seccomp_filter = _seccomp()
    try:
        bpf = seccomp_filter.program()
    except seccomp_filter.FilterUnavailable:
        return None
    read, write = os.pipe()
    try:
        os.write(write, bpf)  # a few KB: well inside a pipe's buffer, so this never blocks
    finally:
        os.close(write)
    return read


def start_bubblewrap(
    limits: Limits, program: str | None = None, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start ``bwrap`` with the sandbox's command line, its seccomp filter passed on a pipe."""
    fd = _filter_fd()
    try:
        return subprocess.Popen(
            bubblewrap_command(limits, shutil.which(BWRAP) or BWRAP, fd, program),
            pass_fds=() if fd is None else (fd,),
            **popen,
        )
    finally:
        if fd is not None:
            os.close(fd)


@functools.cache
def _bubblewrap_state() -> tuple[str | None, str]:
    """(None, "bubblewrap VERSION") where a sandbox starts here, else (the one-line reason, "")."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return f"bubblewrap ({BWRAP}) is not installed: {INSTALL_HINT}", ""
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
        started = start_bubblewrap(
            Limits(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            out, err = started.communicate(b"print(6 * 7)", timeout=60)
        except subprocess.TimeoutExpired:
            started.kill()
            started.communicate()
            raise
        probe = subprocess.CompletedProcess(started.args, started.returncode, out, err)
    except (OSError, subprocess.SubprocessError) as e:
        return f"bubblewrap cannot start ({type(e).__name__}: {e}): {INSTALL_HINT}", ""
    if probe.returncode != 0 or probe.stdout.strip() != b"42":
        said = " ".join(probe.stderr.decode("utf-8", "replace").split())[:200] or (
            f"exit code {probe.returncode}"
        )
        return f"bubblewrap cannot start a sandbox here ({said}): {INSTALL_HINT}", ""
    return None, version or "bubblewrap"


def check(backend: str = BUBBLEWRAP) -> dict[str, str]:
    """What isolation runs model code here, as recorded with a run; raises
    :class:`SandboxUnavailable` where ``backend`` cannot start."""
    if backend == UNSAFE:
        return {"sandbox": UNSAFE, "engine": "audit hook and resource limits only (unsafe)"}
    if backend != BUBBLEWRAP:
        raise SandboxUnavailable(
            f"unknown sandbox {backend!r} (choose one of: {', '.join(BACKENDS)})"
        )
    reason, version = _bubblewrap_state()
    if reason is not None:
        raise SandboxUnavailable(reason)
    return {"sandbox": BUBBLEWRAP, "engine": version, "seccomp": seccomp_state()}


def isolation(backend: str = BUBBLEWRAP) -> dict[str, bool | str]:
    """Which layers hold on this machine for ``backend`` (False everywhere it cannot start)."""
    if backend == BUBBLEWRAP:
        ok = _bubblewrap_state()[0] is None
        return {
            "backend": BUBBLEWRAP,
            "available": ok,
            "mount_namespace": ok,
            "pid_namespace": ok,
            "network_namespace": ok,
            "audit_hook": ok,
            "rlimits": ok,
        }
    return {
        "backend": UNSAFE,
        "available": True,
        "mount_namespace": False,
        "pid_namespace": False,
        "network_namespace": _unshare_works(),
        "audit_hook": True,
        "rlimits": True,
    }


# ---- running ---------------------------------------------------------------------------------
def _set_limits(limits: Limits, nproc: bool) -> None:  # pragma: no cover - between fork and exec
    mem = limits.memory_mb * 2**20
    try:  # SIGXCPU at the soft limit (reported as a time limit), SIGKILL a second later
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    except (ValueError, OSError):
        pass
    todo = [
        (resource.RLIMIT_AS, mem),
        (resource.RLIMIT_FSIZE, limits.file_mb * 2**20),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ]
    if nproc:
        todo.append((resource.RLIMIT_NPROC, 0))
    for what, value in todo:
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass


def _libc_unshare(flags: int) -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    return libc.unshare(flags) == 0


def _unsafe_child(limits: Limits) -> None:  # pragma: no cover - between fork and exec
    os.setsid()
    _libc_unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    _set_limits(limits, nproc=True)


@functools.cache
def _unshare_works() -> bool:
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "print(1)"],
        preexec_fn=lambda: _exit_unless(_libc_unshare(_CLONE_NEWUSER | _CLONE_NEWNET)),
        capture_output=True,
        env={},
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


def _exit_unless(ok: bool) -> None:  # pragma: no cover - runs in the child
    if not ok:
        os._exit(3)


def run_python(
    code: str,
    limits: Limits = Limits(),
    backend: str = BUBBLEWRAP,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run ``code`` in the sandbox and return what happened; nothing of it touches this process.
    Setting ``stop`` (from another thread) kills the sandbox within a tenth of a second, as its
    time limit would. Raises :class:`SandboxUnavailable` where ``backend`` cannot start here."""
    check(backend)
    if backend == BUBBLEWRAP:
        proc = start_bubblewrap(
            limits,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            start_new_session=True,
            preexec_fn=lambda: _set_limits(limits, nproc=False),  # NPROC: set by the child
        )
        return _finish(proc, code, limits, None, stop)
    folder = tempfile.mkdtemp(prefix="grandrounds-sandbox-")
    proc = subprocess.Popen(
        [sys.executable, "-s", "-S", "-B", "-P", str(CHILD)],
        cwd=folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONHASHSEED": "0", "LANG": "C.UTF-8"},
        preexec_fn=lambda: _unsafe_child(limits),
    )
    return _finish(proc, code, limits, folder, stop)


def _finish(
    proc: subprocess.Popen[bytes],
    code: str,
    limits: Limits,
    folder: str | None,
    stop: threading.Event | None,
) -> Outcome:
    try:
        out, err, timed_out, cut = _collect(proc, code.encode("utf-8", "replace"), limits, stop)
    finally:
        _kill_group(proc)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        cleanup = remove_tree(folder) if folder is not None else None
    stdout, stderr = _text(out, limits.output_chars), _text(err, limits.output_chars)
    refused = [
        line.split(" ", 1)[1] for line in stderr.splitlines() if line.startswith("SANDBOX-REFUSED ")
    ]
    code_ = proc.returncode
    if code_ is not None and code_ > 128:  # bubblewrap reports a signalled child as 128 + signal
        code_ = -(code_ - 128)
    if code_ is not None and -code_ in (signal.SIGXCPU, signal.SIGKILL) and not cut:
        timed_out = True
    return Outcome(stdout, stderr, code_, timed_out, refused, cut, cleanup)


def _collect(
    proc: subprocess.Popen[bytes], data: bytes, limits: Limits, stop: threading.Event | None
) -> tuple[bytes, bytes, bool, bool]:
    """Feed the code, read both streams as they come: (stdout, stderr, stopped at the wall-clock
    limit or by ``stop``, cut at the output limit). Never holds more than the limit per stream."""
    cap = limits.output_chars * 4 + 4  # bytes: a character is at most 4 of them in UTF-8
    deadline = time.monotonic() + limits.seconds
    assert proc.stdin and proc.stdout and proc.stderr
    out, err = bytearray(), bytearray()
    got = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}

    def stopped() -> bool:
        return time.monotonic() >= deadline or (stop is not None and stop.is_set())

    with selectors.DefaultSelector() as sel:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        for pipe in (proc.stdout, proc.stderr):
            sel.register(pipe, selectors.EVENT_READ)
        view = memoryview(data)
        if not view:
            sel.unregister(proc.stdin)
            proc.stdin.close()
        while len(sel.get_map()):
            if stopped():
                return bytes(out), bytes(err), True, False
            for key, _ in sel.select(min(max(deadline - time.monotonic(), 0.0), 0.1)):
                if key.fileobj is proc.stdin:
                    try:
                        view = view[os.write(proc.stdin.fileno(), view[:65536]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = got[key.fd]
                buf += chunk[: cap + 1 - len(buf)]
                if len(buf) > cap:
                    return bytes(out), bytes(err), False, True
    while proc.poll() is None:  # both streams closed: the program is ending
        if stopped():
            return bytes(out), bytes(err), True, False
        time.sleep(0.01)
    return bytes(out), bytes(err), False, False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the program's process group (bubblewrap's PID namespace goes with its first
    process); a no-op for a program that has ended."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def remove_tree(folder: str) -> str | None:
    """Remove ``folder`` whatever permissions the program left in it (each folder is made the
    owner's again before it is entered); the reason where something is left, else None."""
    try:
        os.chmod(folder, stat.S_IRWXU)
        for root, dirs, _files in os.walk(folder):  # top-down: each folder opened before entered
            for d in dirs:
                path = os.path.join(root, d)
                if not os.path.islink(path):
                    os.chmod(path, stat.S_IRWXU)
        shutil.rmtree(folder)
    except OSError as e:
        return f"the sandbox folder {folder} was not removed: {e}"
    return f"the sandbox folder {folder} was not removed" if os.path.lexists(folder) else None


def _text(data: bytes, limit: int) -> str:
    text = data.decode("utf-8", "replace")
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"
    )
