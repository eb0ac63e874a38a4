"""The Python sandbox: ordinary code runs, deterministically, with nothing of the harness's
environment; model code cannot read, write, list or delete the user's files, reach another store,
load native code that acts outside, signal or exhaust the harness, fill its disk, or leave a folder
behind; the same holds run by root and by an unprivileged user; and where user namespaces are
refused, the tool is refused with one line saying what is missing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

import pytest

from grandrounds.benchmarks.agent_envs import sandbox
from grandrounds.benchmarks.agent_envs.sandbox import (
    UNSAFE,
    Limits,
    SandboxUnavailable,
    isolation,
    run_python,
)

HERE = Path(__file__).resolve().parent
PROBE = HERE / "sandbox_escapes.py"
FAST = Limits(seconds=3.0, cpu_seconds=2, memory_mb=256)
SECRET = "sk-harness-secret-4b1d"  # the probe harness's environment (sandbox_escapes.SECRET)
#: The harness's peak memory may grow by at most this much while a program floods its output.
FLOOD_RSS_BOUND_KB = 32 * 1024

bwrap = pytest.mark.bwrap


@bwrap
def test_ordinary_code_runs_and_prints():
    out = run_python("import math, json\nprint(json.dumps({'x': round(math.sqrt(2), 4)}))", FAST)
    assert out.exit_code == 0 and out.refused == []
    assert out.text() == '{"x": 1.4142}'


@bwrap
def test_same_code_same_output_on_replay():
    code = "print(list({'b', 'a', 'c', 'd', 'e'}))"
    assert run_python(code, FAST).stdout == run_python(code, FAST).stdout


@bwrap
def test_files_inside_the_folder_work():
    out = run_python("open('notes.txt', 'w').write('kept'); print(open('notes.txt').read())", FAST)
    assert out.exit_code == 0 and out.stdout.strip() == "kept"


@bwrap
def test_the_standard_library_loads_and_nothing_else_is_there():
    code = (
        "import os, sys, decimal, fractions, statistics, datetime, sqlite3, json, re\n"
        "print(sorted(os.listdir('/')), sys.flags.no_site, os.getuid())\n"
        "print(os.path.exists('/etc'), os.path.exists('/proc/1'), os.path.exists('/home'))"
    )
    out = run_python(code, FAST)
    assert out.exit_code == 0, out.text()
    top, *_ = out.stdout.splitlines()
    assert "etc" not in top and "proc" not in top and "home" not in top and "sandbox" in top
    assert out.stdout.splitlines()[1] == "False False False"


@bwrap
@pytest.mark.parametrize(
    ("code", "refused_event"),
    [
        ("open('/etc/passwd').read()", "open"),
        (f"open({os.path.abspath(__file__)!r}).read()", "open"),
        ("open('/tmp/grandrounds-escape.txt', 'w').write('x')", "open"),
        ("import os; os.remove('/tmp/grandrounds-escape.txt')", "os.remove"),
        ("import os; os.mkdir('/tmp/grandrounds-escape-dir')", "os.mkdir"),
        ("import socket", "import"),
        ("import _socket", "import"),
        ("import os; os.fork()", "os.fork"),
        ("import os; os.system('true')", "os.system"),
        ("import os; os.execv('/bin/true', ['true'])", "os.exec"),
        ("import subprocess", "import"),
        ("import ctypes", "import"),
        ("import os; os.kill(1, 9)", "os.kill"),
    ],
)
def test_the_audit_hook_still_refuses(code, refused_event):
    out = run_python(code, FAST)
    assert out.exit_code == 1
    assert any(r.startswith(refused_event) for r in out.refused), out.refused
    assert "PermissionError: sandbox" in out.text()
    assert not os.path.exists("/tmp/grandrounds-escape.txt") and not os.path.exists(
        "/tmp/grandrounds-escape-dir"
    )


@bwrap
def test_cannot_reach_a_listening_socket_on_this_machine():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    got: list[bytes] = []

    def accept():
        server.settimeout(3)
        try:
            conn, _ = server.accept()
            got.append(conn.recv(10))
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    code = f"s = __import__('socket').create_connection(('127.0.0.1', {port})); s.sendall(b'leak')"
    out = run_python(code, FAST)
    t.join()
    server.close()
    assert got == [] and out.exit_code == 1


@bwrap
def test_runs_forever_is_stopped_at_the_wall_clock():
    out = run_python("while True:\n    pass", Limits(seconds=1.5, cpu_seconds=5))
    assert out.timed_out and "time limit" in out.text()


@bwrap
def test_cpu_limit_stops_busy_code_before_the_wall_clock():
    out = run_python("while True:\n    pass", Limits(seconds=20, cpu_seconds=1))
    assert out.timed_out


@bwrap
def test_sleeping_children_die_with_the_sandbox():
    """Past the wall clock the whole sandbox goes, whatever the program was doing."""
    out = run_python("import time\ntime.sleep(60)", Limits(seconds=1.0))
    assert out.timed_out and out.exit_code is not None


@bwrap
def test_memory_limit():
    out = run_python("x = bytearray(1024 ** 3)\nprint('allocated')", FAST)
    assert out.exit_code != 0 and "allocated" not in out.stdout and "MemoryError" in out.text()


@bwrap
def test_environment_is_empty(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    out = run_python("import os; print(sorted(os.environ))", FAST)
    assert "sk-secret-value" not in out.stdout and "OPENAI_API_KEY" not in out.stdout
    assert out.stdout.strip() == "['LANG', 'PWD', 'PYTHONHASHSEED']"


@bwrap
def test_output_is_cut_at_the_limit_and_the_program_stopped():
    out = run_python("print('x' * 100000)\nprint('after')", Limits(seconds=3, output_chars=1000))
    assert len(out.stdout) < 1200 and out.output_cut and "after" not in out.stdout
    assert "output limit" in out.text()


@bwrap
def test_isolation_reports_its_layers():
    layers = isolation()
    assert layers["backend"] == "bubblewrap" and layers["available"]
    assert layers["mount_namespace"] and layers["pid_namespace"] and layers["network_namespace"]
    assert sandbox.check() == {
        "sandbox": "bubblewrap",
        "engine": layers_engine(),
        "seccomp": sandbox.seccomp_state(),
    }


def layers_engine() -> str:
    return subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()


def test_unknown_backend_is_refused_in_one_line():
    with pytest.raises(SandboxUnavailable, match="unknown sandbox 'docker'"):
        sandbox.check("docker")


def test_missing_bubblewrap_refuses_the_tool_with_how_to_install(monkeypatch):
    sandbox._bubblewrap_state.cache_clear()
    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-on-this-path")
    try:
        with pytest.raises(SandboxUnavailable) as got:
            run_python("print(1)", FAST)
    finally:
        sandbox._bubblewrap_state.cache_clear()
    line = str(got.value)
    assert "\n" not in line and "bubblewrap (bwrap-not-on-this-path) is not installed" in line
    assert "apt-get install bubblewrap" in line and UNSAFE in line


def test_unsafe_backend_cleans_a_000_folder():
    out = run_python(
        "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\n"
        "os.chmod('a/b', 0)\nos.chmod('a', 0)\nprint('locked')",
        FAST,
        UNSAFE,
    )
    assert out.stdout.strip() == "locked" and out.cleanup_error is None


def test_remove_tree_reports_what_it_could_not_remove(tmp_path):
    assert sandbox.remove_tree(str(tmp_path / "gone")) is not None  # nothing there: said so
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    os.chmod(tmp_path / "a" / "b", 0)
    os.chmod(tmp_path / "a", 0)
    assert sandbox.remove_tree(str(tmp_path / "a")) is None and not (tmp_path / "a").exists()


# ---- the escapes, from a harness of their own, as root, as nobody, without user namespaces ----
def _extension(folder: Path, target: Path) -> str:
    """A compiled extension module whose import creates ``target`` ('' where no C compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if cc is None or not (Path(include) / "Python.h").exists():
        return ""
    src = folder / "evil.c"
    src.write_text(
        "#define Py_LIMITED_API 0x030b0000\n#include <Python.h>\n#include <fcntl.h>\n"
        "#include <unistd.h>\n"
        'static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "evil", NULL, -1, NULL};\n'
        "PyMODINIT_FUNC PyInit_evil(void) {\n"
        f'  int fd = open("{target}", O_WRONLY | O_CREAT, 0644);\n'
        '  if (fd >= 0) { write(fd, "native", 6); close(fd); }\n'
        "  return PyModule_Create(&m);\n}\n"
    )
    out = folder / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", f"-I{include}", "-o", out, src], check=True)
    return str(out)


def _victim(exe: str) -> Path:
    """A Python installation the user owns (as pyenv or conda make one: a copy of ``exe`` and its
    standard library, with a site-packages), writable by any user, holding files to protect: the
    stand-in for the harness's own interpreter and for the user's files."""
    victim = Path(tempfile.mkdtemp(prefix="grandrounds-victim-"))
    got = subprocess.run(
        [
            exe,
            "-c",
            "import os, sys; print('%d.%d' % sys.version_info[:2], os.path.dirname(os.__file__))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    version, stdlib = got[0], got[1]
    (victim / "bin").mkdir()
    shutil.copy2(os.path.realpath(exe), victim / "bin" / f"python{version}")
    skip = shutil.ignore_patterns(
        "test",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "config-*",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "*.a",
    )
    shutil.copytree(stdlib, victim / "lib" / f"python{version}", ignore=skip, symlinks=True)
    (victim / "lib" / f"python{version}" / "site-packages").mkdir()
    (victim / "secret.txt").write_text("SECRET-CONTENT")
    (victim / "victim.txt").write_text("original")
    (victim / "keep.txt").write_text("keep")
    db = sqlite3.connect(victim / "store.db")
    db.execute("create table calls (secret text)")
    db.execute("insert into calls values ('STORE-SECRET')")
    db.commit()
    db.close()
    for p in [victim, *victim.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o777 if p.is_dir() or p.parent.name == "bin" else 0o666)
    return victim


_CHECK = (
    "import importlib.util as u, sys\n"
    "spec = u.spec_from_file_location('sandbox_under_test', sys.argv[1])\n"
    "m = sys.modules[spec.name] = u.module_from_spec(spec); spec.loader.exec_module(m); m.check()"
)


def _interpreter_for(user: list[str], module: Path) -> str | None:
    """An interpreter whose sandbox ``user`` can start (the base interpreter may sit in a folder
    only its owner may enter: then the system's)."""
    for exe in (
        os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        "/usr/bin/python3",
    ):
        ok = subprocess.run([*user, exe, "-c", _CHECK, module], capture_output=True, check=False)
        if ok.returncode == 0:
            return exe
    return None


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
NO_USERNS = [
    "unshare",
    "--user",
    "--map-root-user",
    "sh",
    "-c",
    'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
    "sh",
]


def _probe(wrapper: list[str], backend: str = "bubblewrap") -> tuple[list[dict], Path, int, list]:
    """Run the escapes from a harness started under ``wrapper``: its lines, VICTIM, its exit code
    and what the runs left in its temporary folder."""
    work = Path(tempfile.mkdtemp(prefix="grandrounds-probe-"))
    os.chmod(work, 0o755)
    tmp = work / "tmp"  # the harness's temporary folder, to see what a run leaves there
    tmp.mkdir()
    os.chmod(tmp, 0o777)
    probe = work / "probe.py"
    shutil.copy(PROBE, probe)
    module = work / "sandbox.py"
    shutil.copy(sandbox.__file__, module)
    shutil.copy(sandbox.CHILD, work / "sandbox_child.py")
    shutil.copy(Path(sandbox.__file__).with_name("seccomp_filter.py"), work / "seccomp_filter.py")
    for p in work.iterdir():
        if p.is_file():
            os.chmod(p, 0o644)
    exe = _interpreter_for(wrapper if wrapper is AS_NOBODY else [], module)
    if exe is None:
        pytest.fail(f"no Python interpreter whose sandbox {' '.join(wrapper)} can start")
    victim = _victim(exe)
    import pyseccomp  # the harness's binding of libseccomp, installed as the package installs it

    for packages in victim.glob("lib/python*/site-packages"):
        shutil.copy(pyseccomp.__file__, packages / "pyseccomp.py")
        os.chmod(packages / "pyseccomp.py", 0o644)
    extension = _extension(work, victim / "native.txt")
    if extension:
        os.chmod(extension, 0o644)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmp)}
    env["GRANDROUNDS_TEST_SECRET"] = SECRET
    python = next((victim / "bin").iterdir())
    cmd = [*wrapper, str(python), str(probe), str(module), str(victim), backend, extension]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    leftovers = [p.name for p in tmp.iterdir()]
    sandbox.remove_tree(str(work))
    return lines, victim, done.returncode, leftovers


def _check_held(lines: list[dict], victim: Path, code: int, leftovers: list) -> dict[str, dict]:
    """Every escape failed, and the harness lived to say so."""
    try:
        return _held(lines, victim, code, leftovers)
    finally:
        sandbox.remove_tree(str(victim))


def _held(lines: list[dict], victim: Path, code: int, leftovers: list) -> dict[str, dict]:
    assert code == 0 and lines and lines[-1].get("done"), (code, lines[-1:])
    assert leftovers == [], f"the sandbox left {leftovers} in the harness's temporary folder"
    by = {x["name"]: x for x in lines if "name" in x}
    everything = json.dumps(lines)
    assert "SECRET-CONTENT" not in everything and "STORE-SECRET" not in everything
    assert SECRET not in everything
    assert not (victim / "planted.txt").exists()
    assert (victim / "victim.txt").read_text() == "original"
    assert (victim / "keep.txt").exists()
    assert not list(victim.glob("lib/*/site-packages/evil.pth"))
    assert not (victim / "other.db").exists()
    assert not (victim / "native.txt").exists()
    listing = by["list /"]["stdout"].splitlines()
    assert listing and "'etc'" not in listing[0] and "'proc'" not in listing[0]
    assert listing[1] == "False"  # the user's files are not in there
    flood = by["output flood"]
    assert flood["output_cut"], flood
    assert flood["peak_rss_kb"] - flood["rss_before_kb"] < FLOOD_RSS_BOUND_KB, flood
    fill = by["disk fill"]["stdout"].split()
    assert fill[-2] == "wrote" and int(fill[-1]) <= 32 * 2**20, fill
    assert by["000 folder"]["stdout"].strip() == "locked"
    assert by["000 folder"]["cleanup_error"] is None
    if "extension module" in by:  # the native code ran, inside
        assert "imported" in by["extension module"]["stdout"], by["extension module"]
    return by


@bwrap
def test_escapes_fail_for_this_user():
    lines, *rest = _probe([])
    _check_held(lines, *rest)
    assert lines[0]["check"]["seccomp"].startswith("on: "), lines[0]  # the filter was loaded too


@bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="runs the harness as nobody: needs root to do so")
def test_escapes_fail_for_an_unprivileged_user():
    lines, *rest = _probe(AS_NOBODY)
    by = _check_held(lines, *rest)
    assert by and lines[-1]["uid"] == 65534


def _userns_can_be_limited() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    ok = subprocess.run([*NO_USERNS, "true"], capture_output=True, text=True, check=False)
    return None if ok.returncode == 0 else f"cannot limit user namespaces: {ok.stderr.strip()}"


@bwrap
def test_without_user_namespaces_the_tool_is_refused_with_its_line():
    why = _userns_can_be_limited()
    if why:
        pytest.skip(why)
    lines, victim, code, _ = _probe(NO_USERNS)
    sandbox.remove_tree(str(victim))
    assert code == 3 and len(lines) == 1, lines
    line = lines[0]["unavailable"]
    assert line.startswith("bubblewrap cannot start a sandbox here")
    assert "apt-get install bubblewrap" in line and UNSAFE in line and "\n" not in line


# ---- the seccomp filter ------------------------------------------------------------------------
#: Asks the kernel for what the filter refuses, past the audit hook (ctypes straight to libc; the
#: program runs as the sandbox's program, not the child): each line "name result".
KERNEL_PROBE = """
import ctypes, errno, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
numbers = dict(arg.split("=") for arg in sys.argv[1:])
def said(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print("ptrace", said(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
for name in ("keyctl", "bpf", "io_uring_setup", "perf_event_open", "userfaultfd"):
    print(name, said(libc.syscall(int(numbers[name]), 0, 0, 0, 0, 0)))
for family, name in ((16, "netlink"), (1, "unix")):
    try:
        socket.socket(family, socket.SOCK_RAW if family == 16 else socket.SOCK_STREAM).close()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, "?"))
print("sum", sum(range(10)))
"""


def _kernel_probe(with_filter: bool) -> dict[str, str]:
    import pyseccomp

    from grandrounds.benchmarks.agent_envs import seccomp_filter

    arch = pyseccomp.system_arch()
    names = ("keyctl", "bpf", "io_uring_setup", "perf_event_open", "userfaultfd")
    argv = " ".join(f"{n}={pyseccomp.resolve_syscall(arch, n)}" for n in names)
    program = f"import sys; sys.argv[1:] = {argv.split()!r}\n" + KERNEL_PROBE
    popen = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if with_filter:
        proc = sandbox.start_bubblewrap(FAST, program=program, **popen)
    else:
        cmd = sandbox.bubblewrap_command(FAST, shutil.which("bwrap") or "bwrap", None, program)
        proc = subprocess.Popen(cmd, **popen)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert seccomp_filter.program()  # compiled here, so the filter case really had one
    return dict(line.split(" ", 1) for line in out.decode().splitlines())


@bwrap
def test_the_seccomp_filter_refuses_the_kernel_surface_and_leaves_ordinary_code_alone():
    seen = _kernel_probe(with_filter=True)
    assert seen == {
        "ptrace": "EPERM",
        "keyctl": "EPERM",
        "bpf": "EPERM",
        "io_uring_setup": "EPERM",
        "perf_event_open": "EPERM",
        "userfaultfd": "EPERM",
        "netlink": "EAFNOSUPPORT",
        "unix": "ok",
        "sum": "45",
    }


@bwrap
def test_without_the_filter_the_same_calls_reach_the_kernel():
    """The probe can tell: with namespaces alone, ptrace on itself and a netlink socket succeed."""
    seen = _kernel_probe(with_filter=False)
    assert seen["ptrace"] == "ok" and seen["netlink"] == "ok" and seen["sum"] == "45"


@bwrap
def test_the_run_records_the_filter_and_says_when_it_is_off(monkeypatch: pytest.MonkeyPatch):
    from grandrounds.benchmarks.agent_envs import seccomp_filter

    assert sandbox.check()["seccomp"].startswith("on: ")

    def missing() -> bytes:
        raise seccomp_filter.FilterUnavailable("libseccomp cannot be loaded (test)")

    monkeypatch.setattr(seccomp_filter, "program", missing)
    assert sandbox.check()["seccomp"] == "off: libseccomp cannot be loaded (test)"
    out = run_python("print(6 * 7)", FAST)  # the namespaces still hold without it
    assert out.stdout == "42\n" and out.exit_code == 0
