"""The escapes model code tried against the Python sandbox, run as a harness of their own.

``VICTIM/bin/python sandbox_escapes.py SANDBOX_PY VICTIM BACKEND [EXTENSION]`` (VICTIM holds
a Python installation the user owns, as pyenv or conda make one) loads the sandbox module
from its file (standard library only, so any user's interpreter can run it), runs each escape
program in it as the harness would, and prints one JSON line per escape: its name, the sandbox's
outcome and this process's peak memory. The escapes aim at the folder VICTIM (a stand-in for the
user's files, site-packages and another store) and at this process (the test starts it with a
secret in its environment; killing it is the goal of two escapes). The test (tests/test_sandbox.py) reads the lines
and looks at VICTIM afterwards. A harness killed by an escape prints no ``done`` line.
"""

import base64
import importlib.util
import json
import os
import resource
import sys

SECRET = "sk-harness-secret-4b1d"
FLOOD_SECONDS = 4.0


def escapes(victim, extension):
    """(name, code, limits overrides) of each escape."""
    me = os.getpid()
    # The harness runs from a Python installation in VICTIM: its prefix is a folder the standard
    # library's code may read, and a path relative to a descriptor of it is not where it looks.
    via = "import os, sys\nlib = os.open(sys.prefix, os.O_RDONLY)\nrel = '.'\n"
    packages = "lib/python{}.{}/site-packages".format(*sys.version_info[:2])
    out = [
        (
            "dir_fd read",
            via + "fd = os.open(rel + '/secret.txt', os.O_RDONLY, dir_fd=lib)\n"
            "print(os.read(fd, 100).decode())",
            {},
        ),
        (
            "dir_fd write",
            via
            + "fd = os.open(rel + '/planted.txt', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=lib)\n"
            "os.write(fd, b'planted')",
            {},
        ),
        (
            "dir_fd append",
            via + "fd = os.open(rel + '/victim.txt', os.O_WRONLY | os.O_APPEND, dir_fd=lib)\n"
            "os.write(fd, b'appended')",
            {},
        ),
        ("dir_fd delete", via + "os.remove(rel + '/keep.txt', dir_fd=lib)", {}),
        (
            ".pth in site-packages",
            via + f"fd = os.open(rel + '/{packages}/evil.pth', os.O_WRONLY | os.O_CREAT, 0o644,"
            " dir_fd=lib)\n"
            "os.write(fd, b'import os; os.system(\"id\")\\n')",
            {},
        ),
        (
            "sqlite3 outside",
            "import sqlite3\n"
            f"db = sqlite3.connect({victim + '/other.db'!r})\n"
            "db.execute('create table t (x)'); db.commit(); print('wrote')",
            {},
        ),
        (
            "sqlite3 reads a store",
            "import sqlite3\n"
            f"db = sqlite3.connect({victim + '/store.db'!r})\n"
            "print(db.execute('select secret from calls').fetchall())",
            {},
        ),
        (
            "list /",
            f"import os\nprint(sorted(os.listdir('/')))\nprint(os.path.exists({victim + '/secret.txt'!r}))",
            {},
        ),
        (
            "parent environ",
            "import os\n"
            f"lib = os.open('/proc/{me}', os.O_RDONLY)\n"
            "fd = os.open('environ', os.O_RDONLY, dir_fd=lib)\n"
            "print(os.read(fd, 100000).decode(errors='replace'))",
            {},
        ),
        (
            "signal parent by pidfd",
            "import os, sys\n"
            f"fd = os.pidfd_open({me})\n"
            "sys.modules['_signal'].pidfd_send_signal(fd, 9)",
            {},
        ),
        ("signal parent by kill", f"import os\nos.kill({me}, 9)", {}),
        (
            "output flood",
            "import sys\nwhile True:\n    sys.stdout.write('x' * 1000000)",
            {"seconds": FLOOD_SECONDS},
        ),
        (
            "disk fill",
            "import os\nn = 0\ntry:\n    for i in range(100000):\n"
            "        with open(f'f{i}', 'wb') as f:\n"
            "            for _ in range(8):\n"
            "                f.write(b'x' * 2**20); n += 2**20\n"
            "except OSError as e:\n    print(type(e).__name__)\nprint('wrote', n)",
            {"disk_mb": 32, "file_mb": 8, "seconds": 20},
        ),
        (
            "000 folder",
            "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\n"
            "os.chmod('a/b', 0)\nos.chmod('a', 0)\nprint('locked')",
            {},
        ),
    ]
    if extension:
        with open(extension, "rb") as f:
            blob = base64.b64encode(f.read()).decode()
        out.append(
            (
                "extension module",
                "import base64, os, sys\n"
                f"open('evil.so', 'wb').write(base64.b64decode({blob!r}))\n"
                "sys.path.insert(0, os.getcwd())\nimport evil\nprint('imported')",
                {},
            )
        )
    return out


def main():
    path, victim, backend = sys.argv[1:4]
    extension = sys.argv[4] if len(sys.argv) > 4 else ""
    spec = importlib.util.spec_from_file_location("sandbox_under_test", path)
    sandbox = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sandbox
    spec.loader.exec_module(sandbox)
    try:
        print(json.dumps({"check": sandbox.check(backend)}), flush=True)
    except sandbox.SandboxUnavailable as e:
        print(json.dumps({"unavailable": str(e)}), flush=True)
        return 3
    for name, code, overrides in escapes(victim, extension):
        limits = sandbox.Limits(**{"seconds": 5.0, "cpu_seconds": 5, **overrides})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        outcome = sandbox.run_python(code, limits, backend)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        record = {
            "name": name,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "exit_code": outcome.exit_code,
            "timed_out": outcome.timed_out,
            "output_cut": outcome.output_cut,
            "cleanup_error": outcome.cleanup_error,
            "peak_rss_kb": after,
            "rss_before_kb": before,
        }
        print(json.dumps(record), flush=True)
    print(json.dumps({"done": True, "uid": os.getuid()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
