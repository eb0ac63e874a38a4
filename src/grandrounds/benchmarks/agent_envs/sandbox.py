"""Model-written Python, run in a locked-down child process, never in the harness's.

Layers, each enough to stop the common escapes on its own where it applies:

1. **An audit hook in the child** (``sandbox_child.py``, PEP 578): no sockets, no new processes,
   no ctypes, no writes or file-system changes outside a fresh temporary folder, no reads outside
   it and the standard library.
2. **Operating-system limits** set in the child before it starts (``resource.setrlimit``): CPU
   seconds, address space, the size of any file written, open files, no core dumps; no new
   processes (``RLIMIT_NPROC`` 0, for users it binds: not root).
3. **No network at all** where the kernel allows unprivileged user namespaces: the child is moved
   into a new user and network namespace (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``), which has
   only a loopback interface that is down. Where that is refused the other layers still hold, and
   :func:`isolation` says which layers are on (it is recorded with the run's environment).
4. **A wall-clock limit**: the child's process group is killed when it runs over.

The child starts with an empty environment (no API keys, no proxies, no ``PYTHON*`` variables
but ``PYTHONHASHSEED=0``, so that the same code prints the same output on a replay), no user
site (``-s``), no site packages (``-S``), no bytecode written (``-B``) and its script's folder
not on the import path (``-P``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


@dataclass(frozen=True)
class Limits:
    """What one run of model code may use."""

    seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 512
    file_mb: int = 8
    output_chars: int = 8000


@dataclass
class Outcome:
    """What the code printed, how it ended, and what the sandbox refused."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    refused: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The tool result the model sees: output, errors, and why it stopped where it did."""
        parts = [self.stdout.rstrip("\n")] if self.stdout.strip() else []
        err = "\n".join(
            line for line in self.stderr.splitlines() if not line.startswith("SANDBOX-REFUSED")
        )
        if err.strip():
            parts.append(f"[stderr]\n{err.strip()}")
        if self.timed_out:
            parts.append("[stopped: the time limit was reached]")
        elif self.exit_code not in (0, None):
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) or "[no output]"


def _libc_unshare(flags: int) -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    return libc.unshare(flags) == 0


def _limit_child(
    limits: Limits,
) -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setsid()
    _libc_unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    mem = limits.memory_mb * 2**20
    try:  # SIGXCPU at the soft limit (reported as a time limit), SIGKILL a second later
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    except (ValueError, OSError):
        pass
    for what, value in (
        (resource.RLIMIT_AS, mem),
        (resource.RLIMIT_FSIZE, limits.file_mb * 2**20),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, 0),
    ):
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass


def isolation() -> dict[str, bool]:
    """Which layers hold on this machine (a child is started to find out about namespaces)."""
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "print(1)"],
        preexec_fn=lambda: _exit_unless(_libc_unshare(_CLONE_NEWUSER | _CLONE_NEWNET)),
        capture_output=True,
        env={},
        timeout=30,
        check=False,
    )
    return {
        "audit_hook": True,
        "rlimits": True,
        "network_namespace": probe.returncode == 0,
        "no_new_processes": os.getuid() != 0,
    }


def _exit_unless(ok: bool) -> None:  # pragma: no cover - runs in the child
    if not ok:
        os._exit(3)


def run_python(code: str, limits: Limits = Limits()) -> Outcome:
    """Run ``code`` in the sandbox and return what happened; nothing of it touches this process."""
    folder = tempfile.mkdtemp(prefix="grandrounds-sandbox-")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-S", "-B", "-P", str(CHILD)],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PYTHONHASHSEED": "0", "LANG": "C.UTF-8"},
            preexec_fn=lambda: _limit_child(limits),
        )
        timed_out = False
        try:
            out, err = proc.communicate(code.encode("utf-8", "replace"), timeout=limits.seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = proc.communicate()
        stdout, stderr = _cut(out, limits.output_chars), _cut(err, limits.output_chars)
        refused = [
            line.split(" ", 1)[1]
            for line in stderr.splitlines()
            if line.startswith("SANDBOX-REFUSED ")
        ]
        if proc.returncode is not None and -proc.returncode in (signal.SIGXCPU, signal.SIGKILL):
            timed_out = True
        return Outcome(stdout, stderr, proc.returncode, timed_out, refused)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _cut(data: bytes, limit: int) -> str:
    text = data.decode("utf-8", "replace")
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"
    )
