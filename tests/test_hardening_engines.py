"""``vllm/`` and ``sglang/`` engines against a local squatter: only the engine the run started is
trusted (a fresh key per run required on every call, no listener before the engine starts, and
on Linux every listener on the port in the engine's process group), and the engine's environment
carries none of our keys. tests/fake_engine.py stands in for both engines and enforces the key as
they do."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.test_engines import alive, env, error_line, gr, medqa, record

SECRETS = {
    "OPENAI_API_KEY": "sk-ours-openai",
    "ANTHROPIC_API_KEY": "sk-ant-ours",
    "MY_GATEWAY_TOKEN": "tok-ours",
    "AWS_SECRET_ACCESS_KEY": "aws-ours",
    "GRANDROUNDS_ENGINE_API_KEY": "old-style",
}


class Squatter:
    """Another user's server on a port: answers every request 200 as an OpenAI server would, and
    counts what it receives."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[tuple[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def answer(self) -> None:
                owner.requests.append((self.command, self.path))
                body = json.dumps(
                    {
                        "object": "list",
                        "data": [{"id": "fake-model"}],
                        "choices": [{"message": {"content": "Answer: B"}, "finish_reason": "stop"}],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engine_gets_a_fresh_key_and_none_of_our_secrets(tmp_path, engine):
    rec = tmp_path / "engine.json"
    r = gr(
        *medqa(tmp_path, f"{engine}/fake-model", f"--engine-arg=--fake-record={rec}", limit=3),
        **SECRETS,
        HF_TOKEN="hf-kept",
    )
    assert r.returncode == 0, r.stderr
    state = record(rec)
    assert state["keyed"], "the engine was started with a key of its own"
    assert state["chat_requests"] == 3 and state["refused"] == 0, (
        "every call (and the readiness probe) carried the key"
    )
    names = set(state["env"])
    assert not names & set(SECRETS), (
        f"our secrets reached the engine: {sorted(names & set(SECRETS))}"
    )
    assert "HF_TOKEN" in names, (
        "Hugging Face's token stays: the engine downloads gated weights with it"
    )
    if (
        engine == "vllm"
    ):  # passed in VLLM_API_KEY: not on the command line, where ps shows it to every user
        assert "VLLM_API_KEY" in names and "--api-key" not in state["argv"]
    else:
        assert state["argv"][state["argv"].index("--api-key") + 1] not in r.stderr + r.stdout
    assert not any(v in r.stderr + r.stdout for v in SECRETS.values())
    assert not alive(state["pid"])


def test_two_runs_use_two_keys(tmp_path):
    keys = []
    for n in (1, 2):
        rec = tmp_path / f"engine{n}.json"
        r = gr(
            *medqa(
                tmp_path,
                "sglang/fake-model",
                f"--engine-arg=--fake-record={rec}",
                limit=1,
                store=f"s{n}.db",
            )
        )
        assert r.returncode == 0, r.stderr
        argv = record(rec)["argv"]
        keys.append(argv[argv.index("--api-key") + 1])
    assert keys[0] != keys[1] and all(len(k) >= 32 for k in keys)


def test_an_api_key_in_the_engine_arguments_is_refused(tmp_path):
    r = gr(*medqa(tmp_path, "vllm/fake-model", "--engine-arg=--api-key=mine", limit=1))
    assert r.returncode == 2
    assert "drop --api-key from the engine arguments" in error_line(r.stderr)


def test_a_squatter_on_the_port_before_the_engine_starts_gets_nothing(tmp_path):
    rec = tmp_path / "engine.json"
    squatter = Squatter()
    try:
        r = gr(
            *medqa(
                tmp_path,
                "vllm/fake-model",
                "--model-opt",
                f"port={squatter.port}",
                f"--engine-arg=--fake-record={rec}",
                limit=3,
            )
        )
    finally:
        squatter.close()
    assert r.returncode == 2, r.stderr
    line = error_line(r.stderr)
    assert (
        f"something already listens on 127.0.0.1:{squatter.port} before the engine was started"
        in line
    )
    assert squatter.requests == [], "no probe, prompt or key went to the squatter"
    assert not rec.exists(), "the engine was not started"


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the listener's owner is read from /proc"
)
def test_a_squatter_that_binds_while_the_engine_loads_gets_nothing(tmp_path):
    """The port is free when checked, then taken while the engine loads: the listener found on it
    is not in the engine's process group, so the run stops before sending anything."""
    rec = tmp_path / "engine.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grandrounds",
            *medqa(
                tmp_path,
                "vllm/fake-model",
                "--engine-arg=--fake-start-delay=3",
                f"--engine-arg=--fake-record={rec}",
                limit=3,
            ),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    squatter = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not rec.exists():
            time.sleep(0.05)
        argv = record(rec)["argv"]
        squatter = Squatter(int(argv[argv.index("--port") + 1]))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if squatter is not None:
            squatter.close()
    assert proc.returncode == 2, err
    assert (
        f"a process outside the engine listens on port {squatter.port}; refusing to send prompts to it"
        in error_line(err)
    )
    assert squatter.requests == [], "no probe, prompt or key went to the squatter"
    assert record(rec)["chat_requests"] == 0 and not alive(record(rec)["pid"])


def test_the_engine_refuses_calls_without_its_key(tmp_path):
    """The key is enforced: a local user who finds the engine's port cannot use it."""
    import urllib.error
    import urllib.request

    rec = tmp_path / "engine.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grandrounds",
            *medqa(
                tmp_path,
                "vllm/fake-model",
                "--engine-arg=--fake-latency=0.5",
                "--concurrency",
                "1",
                f"--engine-arg=--fake-record={rec}",
                limit=4,
            ),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (rec.exists() and record(rec)["ready"]):
            time.sleep(0.05)
        argv = record(rec)["argv"]
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/v1/models"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=5)
        assert e.value.code == 401
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert record(rec)["refused"] == 1 and record(rec)["chat_requests"] == 4


def test_engine_env_keeps_hugging_face_tokens_only(monkeypatch):
    from grandrounds.providers.engine_server import engine_env

    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "MY_SECRET_THING",
        "SIGNING_KEY",
    ):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("HF_TOKEN", "h")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "h")
    monkeypatch.setenv("PATH", "/usr/bin")
    got = engine_env({"VLLM_API_KEY": "run-key"})
    assert {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "PATH"} <= set(got) and got[
        "VLLM_API_KEY"
    ] == "run-key"
    assert not {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "MY_SECRET_THING",
        "SIGNING_KEY",
    } & set(got)
