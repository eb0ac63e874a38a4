"""MedAgentsBench hard subset: the real 10 files, a scripted model through the CLI against the files'
own keys, and the authors' CoT prompt (cot.py run_cot, run with a fake client) byte for byte."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medagentsbench import SOURCES, MedAgentsBench
from grandrounds.core.errors import DataError
from tests.conftest import shared_file
from tests.exam_cli import cli_run, longest
from tests.official import load_official

COUNTS = {
    "medqa": 100,
    "pubmedqa": 100,
    "medmcqa": 100,
    "medbullets": 89,
    "mmlu": 73,
    "mmlu-pro": 100,
    "afrimedqa": 32,
    "medexqa": 100,
    "medxpertqa-r": 100,
    "medxpertqa-u": 100,
}


def root() -> Path:
    return shared_file("medagentsbench", "data", "medqa", "test_hard.jsonl").parent.parent


def records(source: str) -> list[dict]:
    return [
        json.loads(line)
        for line in (root() / source / "test_hard.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def test_real_files_load_the_source_notes_counts() -> None:
    samples = MedAgentsBench().load(root())
    assert len(samples) == 894 == sum(COUNTS.values())
    for source, n in COUNTS.items():
        assert sum(s.metadata["source"] == source for s in samples) == n == len(records(source))
    assert [s.target for s in samples] == [r["answer_idx"] for src in SOURCES for r in records(src)]
    assert {len(s.choices) for s in samples} >= {3, 4, 5, 10}
    assert MedAgentsBench().dataset_hash(root()) == MedAgentsBench().dataset_hash(root().parent)


def options_of(prompt: str) -> list[str]:
    """The options as cot.py writes them: "(A) text (B) text ..." on the line after "Options:"."""
    line = prompt.split("Options:\n", 1)[1].split("\n\n", 1)[0]
    return [t.strip() for t in re.split(r"(?:^| )\([A-J]\) ", line)[1:]]


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_scripted_model_accuracy_through_the_cli(tmp_path: Path, protocol: str) -> None:
    first = records("medqa")[0]["question"]

    def reply(req):
        prompt = req.messages[-1].content
        if first in prompt:
            return RuntimeError("upstream 500")
        if protocol == "reference":
            opts = options_of(prompt)
        else:
            block = prompt[
                prompt.rindex("\nA. ") + 1 :
            ]  # our prompt ends with the options, "X. text" per line
            opts = [t.rstrip("\n") for t in re.split(r"^[A-J]\. ", block, flags=re.M)[1:]]
        return f"Step by step... so the answer is ({'ABCDEFGHIJ'[longest(opts)]})."

    res = cli_run(tmp_path, "medagentsbench", root(), reply, "--protocol", protocol)
    right = [
        longest(list(r["options"].values())) == "ABCDEFGHIJ".index(r["answer_idx"])
        for src in SOURCES
        for r in records(src)
    ]
    answered = right[1:]
    n = 894 if protocol == "reference" else 893
    assert res["n"] == n and res["score"] == pytest.approx(sum(answered) / n)
    assert set(res["breakdown"]["source"]) == set(SOURCES) and "macro_accuracy" in res["extra"]
    print(
        f"medagentsbench {protocol}: {res['score']:.4f} = {sum(answered)}/{n} (independent count)"
    )


def test_reference_messages_are_cot_py_byte_for_byte() -> None:
    """cot.py's ``run`` (options_text) and ``run_cot`` (the chat-model branch), with a fake client that
    records the first call's messages and then fails, so nothing else runs."""
    official = load_official("medagentsbench/baselines/MedPrompt/cot.py", ["run_cot", "run"])
    sent: list = []

    class Stop(Exception):
        pass

    class Completions:
        def create(self, **kw):
            sent.append((kw["messages"], kw.get("temperature")))
            raise Stop

    client = type("Client", (), {"chat": type("Chat", (), {"completions": Completions()})()})()
    official.run.__globals__["print"] = lambda *a, **k: None
    bench = MedAgentsBench()
    same = 0
    samples = bench.load(root())
    for s, rec in zip(samples, (r for src in SOURCES for r in records(src))):
        assert official.run(dict(rec), client, "gpt-4o-mini", retries=1) is None
        want, temperature = sent.pop()
        got = [
            {"role": m.role, "content": m.content}
            for m in bench.prompt(s, RunOptions(protocol="reference")).messages
        ]
        same += got == want
        assert temperature == 0.0
    print(f"MedAgentsBench cot.py messages: {same}/{len(samples)} identical")
    assert same == len(samples)


def test_bad_record_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "medqa" / "test_hard.jsonl"
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {"realidx": 1, "question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "C"}
        )
        + "\n"
    )
    with pytest.raises(
        DataError, match=r"test_hard\.jsonl.*1.*answer_idx 'C' is not one of the options AB"
    ):
        MedAgentsBench(sources="medqa").load(tmp_path)
