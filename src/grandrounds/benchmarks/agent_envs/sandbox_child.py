"""The program the Python sandbox runs (``python -s -S -B -P sandbox_child.py``), reading the model's
code on standard input. Before the code runs it installs an audit hook (PEP 578), which code
running later cannot remove, refusing: sockets and name lookups; new processes (fork, exec,
spawn, system, subprocess); ctypes and the modules that reach the operating system unaudited;
files opened for writing, and file-system changes, outside the working folder (a fresh temporary
folder); and files opened for reading outside that folder and the standard library. Each refusal
raises PermissionError in the model's code and is written to standard error on a line starting
with ``SANDBOX-REFUSED``, so the parent can list it. This file imports nothing of the package.
"""

import os
import sys

_HERE = os.path.realpath(os.getcwd())
_STDLIB = tuple(
    os.path.realpath(p) for p in {os.path.dirname(os.__file__), sys.base_prefix, sys.prefix}
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_NO_PROCESS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "pty.spawn",
        "os.startfile",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "ctypes.call_function",
        "os.putenv",
        "os.unsetenv",
        "sys.setprofile",
        "sys.settrace",
        "os.chroot",
    }
)
_NO_NETWORK = ("socket.", "ssl.")
_NO_IMPORT = frozenset(
    {
        "_ctypes",
        "ctypes",
        "_posixsubprocess",
        "_socket",
        "socket",
        "ssl",
        "_ssl",
        "mmap",
        "resource",
        "fcntl",
        "termios",
        "pty",
        "_multiprocessing",
        "multiprocessing",
        "signal",
        "_signal",
        "faulthandler",
    }
)
_PATH_CHANGES = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.move",
        "os.chdir",
    }
)


def _inside(path, roots):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any(real == r or real.startswith(r + os.sep) for r in roots)


def _refuse(event, what):
    sys.stderr.write(f"SANDBOX-REFUSED {event}: {what}\n")
    raise PermissionError(f"sandbox: {event} refused ({what})")


def _open_allowed(args):
    path, mode, flags = (list(args) + [None, None, None])[:3]
    if isinstance(path, int):
        return True  # an already open descriptor
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & _WRITE_FLAGS
    )
    if writing:
        return _inside(path, (_HERE,))
    return _inside(path, (_HERE, *_STDLIB))


def _hook(event, args):
    if event == "open" and not _open_allowed(args):
        _refuse(event, repr(args[0])[:200])
    elif event in _NO_PROCESS or event.startswith(_NO_NETWORK):
        _refuse(event, repr(args)[:200])
    elif event == "import" and args and str(args[0]).split(".")[0] in _NO_IMPORT:
        _refuse(event, str(args[0]))
    elif event in _PATH_CHANGES and not all(
        _inside(a, (_HERE,)) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))
    ):
        _refuse(event, repr(args)[:200])


def _no_new_processes():
    """RLIMIT_NPROC 0 (binds users other than root), set here: bubblewrap itself forks first."""
    import resource  # noqa: PLC0415  (before the hook, which refuses it to the model's code)

    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ValueError, OSError):
        pass


def main():
    _no_new_processes()
    code = sys.stdin.read()
    sys.stdin = open(os.devnull)  # noqa: SIM115  (opened before the hook; the code reads nothing more)
    sys.addaudithook(_hook)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<model code>", "exec"), namespace)  # noqa: S102  (the model's code, inside the sandbox)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001  (the model sees its own error, as Python would print it)
        _print_error(e)
        sys.exit(1)


def _print_error(error):
    """The error and the model code's own lines in its traceback (no file of this program is read)."""
    tb = error.__traceback__
    lines = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<model code>":
            lines.append(f"  line {tb.tb_lineno}, in {tb.tb_frame.f_code.co_name}")
        tb = tb.tb_next
    sys.stderr.write("Traceback (most recent call last):\n" + "".join(x + "\n" for x in lines))
    sys.stderr.write(f"{type(error).__name__}: {error}\n")


if __name__ == "__main__":
    main()
