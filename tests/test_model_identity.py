"""A score names the exact model behind it: an engine argument that changes the answers, a GGUF file
replaced at the same path, or another gateway account is a new run with new calls; what does not
change the model (the port, memory settings, the order arguments are typed in) keeps every key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grandrounds.providers.base import ModelSpec, account_label
from grandrounds.providers.engines import output_args
from grandrounds.providers.llamacpp import LlamaCppProvider
from grandrounds.providers.openai_compat import OpenAIProvider
from tests.test_engines import FAKE, gr, medqa


def test_output_args_are_normalised_and_placement_args_left_out() -> None:
    assert (
        output_args([]) == ""
        and output_args(["--port", "8001", "--gpu-memory-utilization=0.9", "--host", "0.0.0.0"])
        == ""
    )
    a = output_args(["--dtype=float16", "--max-model-len", "8192"])
    assert a == output_args(
        ["--max_model_len=8192", "--dtype", "float16", "--port", "1"]
    )  # forms and order
    assert a != output_args(["--dtype=bfloat16", "--max-model-len", "8192"])
    assert output_args(["--quantization=awq"]) not in ("", a)


def test_two_vllm_runs_differing_in_an_output_changing_argument_are_two_runs(
    tmp_path: Path,
) -> None:
    ids = {}
    for name, extra in {
        "fp16": "--engine-arg=--dtype=float16",
        "awq": "--engine-arg=--quantization=awq",
        "fp16-again": "--engine-arg=--dtype=float16",
        "fp16-port": "--engine-arg=--dtype=float16",
    }.items():
        args = medqa(tmp_path, "vllm/fake-model", extra, "--dry-run", "--out", str(tmp_path / name))
        if name == "fp16-port":
            args += ["--engine-arg=--gpu-memory-utilization=0.8"]
        r = gr(*args)
        assert r.returncode == 0, r.stderr
        ids[name] = json.loads((tmp_path / name / "plan.json").read_text())["run_id"]
    assert ids["fp16"] != ids["awq"]
    assert ids["fp16"] == ids["fp16-again"] == ids["fp16-port"]
    assert FAKE.exists()


def test_a_gguf_file_replaced_at_the_same_path_is_another_model(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF weights v1")
    first = LlamaCppProvider(ModelSpec("llamacpp", str(model))).request_base_url()
    again = LlamaCppProvider(ModelSpec("llamacpp", str(model))).request_base_url()
    model.write_bytes(b"GGUF weights v2, re-downloaded")
    os.utime(model, ns=(1, 2))
    second = LlamaCppProvider(ModelSpec("llamacpp", str(model))).request_base_url()
    assert first == again and first != second and first.startswith("file:m.gguf@")
    book = json.loads((tmp_path / "cache" / "gguf-sha256.json").read_text())
    assert len(book) == 2  # each file version hashed once, remembered by path, size and time


def test_a_gateway_account_is_in_the_key_without_its_secret(monkeypatch) -> None:
    monkeypatch.setenv("TEAM_B_KEY", "sk-secret-b")
    default = OpenAIProvider(ModelSpec("openai", "m", "https://gw.example/v1"))
    other = OpenAIProvider(
        ModelSpec("openai", "m", "https://gw.example/v1"), api_key_env="TEAM_B_KEY"
    )
    user = OpenAIProvider(ModelSpec("openai", "m", "https://alice:pw@gw.example/v1"))
    assert (
        default.request_base_url() == "https://gw.example/v1"
    )  # the default account: keys as before
    for p in (other, user):
        assert (
            "#account:" in p.request_base_url()
            and p.request_base_url() != default.request_base_url()
        )
        assert (
            "sk-secret" not in p.request_base_url()
            and "pw" not in p.request_base_url()
            and "alice" not in p.request_base_url()
        )
    assert account_label("OPENAI_API_KEY", "OPENAI_API_KEY", None) == ""
    assert account_label("TEAM_B_KEY", "OPENAI_API_KEY", None) != account_label(
        "TEAM_C_KEY", "OPENAI_API_KEY", None
    )


@pytest.mark.parametrize("spec", ["openai/m", "anthropic/m"])
def test_default_runs_keep_their_request_keys(spec: str, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    from grandrounds.run.config import make_provider

    p = make_provider(spec, "http://127.0.0.1:9/v1")
    assert "#account" not in p.request_base_url()
