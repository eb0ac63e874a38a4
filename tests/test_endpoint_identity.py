"""One service at several URLs is one model (``--model-opt endpoint_id=NAME``), and a run served
by an engine settles on a machine without the engine when nothing needs asking."""

from __future__ import annotations

import shlex
import sqlite3
import sys

from grandrounds.providers.base import ModelSpec
from grandrounds.run.config import make_provider
from tests.conftest import shared_file
from tests.test_engines import FAKE
from tests.test_shards import _run_id, answer, gr

MEDQA = ("medqa", "phrases_no_exclude_test.jsonl")


def _medqa(data, url: str, store, *extra: str):
    return gr(
        "run", "medqa", "--data", str(data), "--limit", "20", "--model", "openai/m",
        "--base-url", url, "--store", str(store), *extra,
    )  # fmt: skip


def test_one_server_named_two_ways_is_one_model_with_an_endpoint_id(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    with LoopbackServer(answer) as srv:
        local = srv.base_url.replace("127.0.0.1", "localhost")
        a = _medqa(data, srv.base_url, tmp_path / "s.db", "--model-opt", "endpoint_id=ward-llm")
        b = _medqa(data, local, tmp_path / "s.db", "--model-opt", "endpoint_id=ward-llm")
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        assert srv.stats.requests == 20  # the second name asked nothing
        assert _run_id(a.stderr) == _run_id(b.stderr)
        # without the name, the URL is the identity (as it always was): another run, asked again
        c = _medqa(data, local, tmp_path / "s.db")
        assert c.returncode == 0, c.stderr
        assert _run_id(c.stderr) != _run_id(a.stderr) and srv.stats.requests == 40
    with sqlite3.connect(tmp_path / "s.db") as db:
        urls = {
            r[0] for r in db.execute("SELECT json_extract(request_json, '$.base_url') FROM calls")
        }
    assert "endpoint:ward-llm" in urls and local in urls


def test_endpoint_id_reaches_judges_and_keeps_the_account_apart():
    p = make_provider("openai/judge", "http://10.0.0.7:8000/v1", endpoint_id="judge-svc")
    q = make_provider("openai/judge", "http://judge.default.svc:8000/v1", endpoint_id="judge-svc")
    assert p.request_base_url() == q.request_base_url() == "endpoint:judge-svc"
    other = make_provider(
        "openai/judge", "http://10.0.0.7:8000/v1", endpoint_id="judge-svc", api_key_env="TEAM_B_KEY"
    )
    assert other.request_base_url().startswith("endpoint:judge-svc#account:")
    assert other.request_base_url() != p.request_base_url()  # another account: never shared
    assert ModelSpec.parse("openai/judge").model == "judge"


def test_judge_opt_is_checked(tmp_path):
    r = gr(
        "run", "healthbench", "--model", "openai/m", "--judge", "openai/j@http://127.0.0.1:9/v1",
        "--judge-opt", "no_such=1", "--store", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert r.returncode == 2 and "no_such" in r.stderr


def test_an_engine_run_settles_without_the_engine_and_refuses_a_call(tmp_path):
    data = shared_file(*MEDQA)
    exe = f"executable={shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"
    base = ["run", "medqa", "--data", str(data), "--model", "vllm/fake-model"]
    store = ["--store", str(tmp_path / "s.db")]
    first = gr(*base, "--limit", "4", "--model-opt", exe, *store)
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(tmp_path / "s.db") as db:  # as a merged store is: graded, not settled
        db.execute("DELETE FROM settled")
        db.execute("DELETE FROM results")
    coordinator = [
        "--model-opt",
        "executable=/nonexistent/vllm",
        "--model-opt",
        "version=0.0.0+fake",
    ]
    settle = gr(*base, "--limit", "4", *coordinator, *store)
    assert settle.returncode == 0, settle.stderr
    assert "0 calls made, 4 from the store" in settle.stderr
    assert _run_id(settle.stderr) == _run_id(first.stderr)
    more = gr(*base, "--limit", "5", *coordinator, *store)
    assert more.returncode == 2 and "could not start /nonexistent/vllm" in more.stderr
