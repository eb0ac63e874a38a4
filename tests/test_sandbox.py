"""The Python sandbox holds against model code that reads files, writes outside its folder, opens
sockets, starts processes, reaches for ctypes, exhausts memory or runs forever; and ordinary code
runs, deterministically, with nothing of the harness's environment."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from grandrounds.benchmarks.agent_envs.sandbox import Limits, isolation, run_python

FAST = Limits(seconds=3.0, cpu_seconds=2, memory_mb=256)


def test_ordinary_code_runs_and_prints():
    out = run_python("import math, json\nprint(json.dumps({'x': round(math.sqrt(2), 4)}))", FAST)
    assert out.exit_code == 0 and out.refused == []
    assert out.text() == '{"x": 1.4142}'


def test_same_code_same_output_on_replay():
    code = "print(list({'b', 'a', 'c', 'd', 'e'}))"
    assert run_python(code, FAST).stdout == run_python(code, FAST).stdout


def test_files_inside_the_folder_work():
    out = run_python("open('notes.txt', 'w').write('kept'); print(open('notes.txt').read())", FAST)
    assert out.exit_code == 0 and out.stdout.strip() == "kept"


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
def test_refusals(code, refused_event):
    out = run_python(code, FAST)
    assert out.exit_code == 1
    assert any(r.startswith(refused_event) for r in out.refused), out.refused
    assert "PermissionError: sandbox" in out.text()
    assert not os.path.exists("/tmp/grandrounds-escape.txt") and not os.path.exists(
        "/tmp/grandrounds-escape-dir"
    )


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


def test_runs_forever_is_stopped():
    out = run_python("while True:\n    pass", Limits(seconds=1.5, cpu_seconds=5))
    assert out.timed_out and "time limit" in out.text()


def test_cpu_limit_stops_busy_code_before_the_wall_clock():
    out = run_python("while True:\n    pass", Limits(seconds=20, cpu_seconds=1))
    assert out.timed_out


def test_memory_limit():
    out = run_python("x = bytearray(1024 ** 3)\nprint('allocated')", FAST)
    assert out.exit_code != 0 and "allocated" not in out.stdout and "MemoryError" in out.text()


def test_environment_is_empty(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    out = run_python("import os; print(sorted(os.environ))", FAST)
    assert "sk-secret-value" not in out.stdout and "OPENAI_API_KEY" not in out.stdout


def test_output_is_capped():
    out = run_python("print('x' * 100000)", Limits(seconds=3, output_chars=1000))
    assert len(out.stdout) < 1200 and "more characters cut" in out.stdout


def test_isolation_reports_its_layers():
    layers = isolation()
    assert layers["audit_hook"] and layers["rlimits"]
    assert isinstance(layers["network_namespace"], bool)
