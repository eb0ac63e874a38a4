"""Adding a toy exam, a toy VQA set and a toy provider to a copy of the project, as
docs/development.md says: the files each touches are counted (written by hand, and written by
scripts/gen_docs.py), the docs checks pass on the result, and each new piece runs end to end
through the real command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import offline_env

ROOT = Path(__file__).resolve().parents[1]

TOY_EXAM = '''"""A toy exam: MedQA's JSON Lines format, on the shared exam layer."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.medqa import load_medqa_format
from grandrounds.core.records import Sample


class ToyExam(MultipleChoiceBenchmark):
    """Four-option questions in ``toy.jsonl``; accuracy."""

    name: ClassVar[str] = "toy-exam"
    description: ClassVar[str] = "A toy exam (--data toy.jsonl); accuracy"

    def data_files(self, root: Path) -> list[Path]:
        return [resolve_file(root, "toy.jsonl")]

    def load(self, root: Path) -> list[Sample]:
        return load_medqa_format(self, self.data_files(root)[0])
'''

TOY_VQA = '''"""A toy VQA set: ``toy_vqa.json`` (qid, image, question, answer) beside an ``images/`` folder."""

from __future__ import annotations

from pathlib import Path

from grandrounds.benchmarks.vqa import VQABenchmark
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample


class ToyVQA(VQABenchmark):
    """Short answers about images; normalised exact match."""

    name = "toy-vqa"
    description = "A toy VQA set (--data folder); exact match"
    question_file = "toy_vqa.json"

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        out = []
        for i, r in enumerate(self.rows(path)):
            image = path.parent / "images" / str(r["image"])
            if not image.is_file():
                raise DataError(path, i, f"no image {r['image']!r}")
            out.append(self.ask(str(r["qid"]), r["question"], image, r["answer"], i, closed=True, closed_yes_no=True))
        return out
'''

TOY_PROVIDER = '''"""A toy provider: answers every question "A", and "yes" where it is shown an image."""

from __future__ import annotations

from typing import Any

from grandrounds.core.records import Request, Response, Usage
from grandrounds.providers.base import Provider
from grandrounds.providers.images import ImageLimits


class ToyProvider(Provider):
    """``toy/NAME``: "A", or "yes" to a question with an image."""

    example = "toy/any"
    sees_images = True

    def image_limits(self) -> Any:
        return ImageLimits(source="the toy provider")

    async def call(self, request: Request) -> Response:
        text = "yes" if any(m.images for m in request.messages) else "Answer: A"
        return Response(key=request.key(), text=text, usage=Usage(1, 1))
'''


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def touched(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(k for k in after.keys() | before.keys() if before.get(k) != after.get(k))


def add_line(path: Path, after: str, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert after in text, (path, after)
    path.write_text(text.replace(after, after + line, 1), encoding="utf-8")


def add_row(page: Path, before_row: str, row: str) -> None:
    add_line(page, "", "")  # the page exists
    text = page.read_text(encoding="utf-8")
    at = text.index(before_row)
    page.write_text(text[:at] + row + "\n" + text[at:], encoding="utf-8")


def regenerate(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    for args in ([], ["--check"]):
        r = subprocess.run(
            [sys.executable, str(repo / "scripts" / "gen_docs.py"), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert r.returncode == 0, r.stdout + r.stderr


def grandrounds(repo: Path, *args: str) -> str:
    env = {**offline_env(), "PATH": os.environ["PATH"], "PYTHONPATH": str(repo / "src")}
    env["HOME"] = str(repo)
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


#: What docs/development.md says each addition touches: by hand, then written by gen_docs.py.
EXPECTED = {
    "exam": (
        [
            "docs/benchmarks-overview.md",
            "docs/protocols.md",
            "src/grandrounds/benchmarks/table.py",
            "src/grandrounds/benchmarks/toy_exam.py",
        ],
        ["docs/ARCHITECTURE.md", "docs/benchmarks/index.md", "docs/benchmarks/toy_exam.md"],
    ),
    "vqa": (
        [
            "docs/benchmarks-overview.md",
            "docs/protocols.md",
            "src/grandrounds/benchmarks/table.py",
            "src/grandrounds/benchmarks/toy_vqa.py",
        ],
        ["docs/ARCHITECTURE.md", "docs/benchmarks/index.md", "docs/benchmarks/toy_vqa.md"],
    ),
    "provider": (
        ["src/grandrounds/providers/table.py", "src/grandrounds/providers/toy.py"],
        ["docs/ARCHITECTURE.md"],
    ),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    for name in ("src", "docs", "scripts"):
        shutil.copytree(
            ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    (repo / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "test_layers.py", repo / "tests" / "test_layers.py")
    shutil.copy(ROOT / "README.md", repo / "README.md")
    return repo


def _add_exam(repo: Path) -> None:
    pkg = repo / "src" / "grandrounds"
    (pkg / "benchmarks" / "toy_exam.py").write_text(TOY_EXAM, encoding="utf-8")
    add_line(
        pkg / "benchmarks" / "table.py",
        "BUILTINS: dict[str, str] = {\n",
        '    "toy-exam": "grandrounds.benchmarks.toy_exam:ToyExam",\n',
    )
    add_row(
        repo / "docs" / "benchmarks-overview.md",
        "| `medec` |",
        "| `toy-exam` | four-option toy questions | accuracy |",
    )
    add_row(
        repo / "docs" / "protocols.md",
        "| `mediqa-qa-2019` |",
        "| `toy-exam` | no published protocol: ours under both | |",
    )


def _add_vqa(repo: Path) -> None:
    pkg = repo / "src" / "grandrounds"
    (pkg / "benchmarks" / "toy_vqa.py").write_text(TOY_VQA, encoding="utf-8")
    add_line(
        pkg / "benchmarks" / "table.py",
        "BUILTINS: dict[str, str] = {\n",
        '    "toy-vqa": "grandrounds.benchmarks.toy_vqa:ToyVQA",\n',
    )
    add_row(
        repo / "docs" / "benchmarks-overview.md",
        "| `medec` |",
        "| `toy-vqa` | toy questions about images | exact match |",
    )
    add_row(
        repo / "docs" / "protocols.md",
        "| `mediqa-qa-2019` |",
        "| `toy-vqa` | lmms-eval's SLAKE prompt and reading, as `vqa-rad` | as `vqa-rad` |",
    )


def _add_provider(repo: Path) -> None:
    pkg = repo / "src" / "grandrounds"
    (pkg / "providers" / "toy.py").write_text(TOY_PROVIDER, encoding="utf-8")
    add_line(
        pkg / "providers" / "table.py",
        "BUILTINS: dict[str, str] = {\n",
        '    "toy": "grandrounds.providers.toy:ToyProvider",\n',
    )


def test_adding_an_exam_a_vqa_set_and_a_provider_touches_the_files_the_guide_names(
    repo: Path, tmp_path: Path
) -> None:
    counted = {}
    for kind, add in (("exam", _add_exam), ("vqa", _add_vqa), ("provider", _add_provider)):
        before = snapshot(repo)
        add(repo)
        by_hand = touched(before, snapshot(repo))
        middle = snapshot(repo)
        regenerate(repo)  # gen_docs.py, then its --check: no drift left
        generated = touched(middle, snapshot(repo))
        counted[kind] = (by_hand, generated)
    print("\nfiles touched (by hand | written by gen_docs.py):")
    for kind, (hand, gen) in counted.items():
        print(f"  {kind}: {len(hand)} | {len(gen)}: {', '.join(hand)} | {', '.join(gen)}")
    assert counted == EXPECTED

    guide = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    for hand, gen in EXPECTED.values():
        for path in hand + gen:  # the guide names each file (a new module by its folder)
            named = re.sub(r"toy\w*\.", "<name>.", path.removeprefix("src/grandrounds/"))
            assert f"`{named}`" in guide, named

    # The toy exam and the toy VQA set run through the command, answered by the toy provider.
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "toy.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "question": f"Question {i}?",
                    "answer": "x" if i < 3 else "y",
                    "options": {"A": "x", "B": "y", "C": "z", "D": "w"},
                    "answer_idx": "A" if i < 3 else "B",
                    "meta_info": "toy",
                }
            )
            + "\n"
            for i in range(4)
        ),
        encoding="utf-8",
    )
    from PIL import Image

    Image.new("RGB", (8, 8), "white").save(data / "images" / "a.png")
    (data / "toy_vqa.json").write_text(
        json.dumps(
            [
                {"qid": 1, "image": "a.png", "question": "Is it white?", "answer": "yes"},
                {"qid": 2, "image": "a.png", "question": "Is it black?", "answer": "no"},
            ]
        ),
        encoding="utf-8",
    )
    store = str(tmp_path / "s.db")
    out = grandrounds(
        repo,
        "run",
        "toy-exam",
        "--model",
        "toy/any",
        "--data",
        str(data / "toy.jsonl"),
        "--store",
        store,
    )
    assert "toy-exam" in out and "0.750" in out, out
    out = grandrounds(
        repo, "run", "toy-vqa", "--model", "toy/any", "--data", str(data), "--store", store
    )
    assert "toy-vqa" in out and "0.500" in out, out
