"""The documentation and the newcomer's path: generated pages up to date, the MkDocs build strict
(broken links fail), the README a front page whose commands work, set-up saying what it builds,
and the demo saying what its numbers mean."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.demo_notes import chance_level, demo_notes
from grandrounds.cli.main import app
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
DEMO_FILE = ROOT / "src" / "grandrounds" / "data" / "demo_exam.jsonl"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- generated pages ---------------------------------------------------------------------------


def test_generated_pages_are_up_to_date(tmp_path):
    """docs/benchmarks/*.md and docs/cli.md are what scripts/gen_docs.py writes from the code now."""
    gen = _gen_docs()
    assert gen.main(["--out", str(tmp_path)]) == 0
    fresh = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.md"))
    behind = [
        rel
        for rel in fresh
        if not (ROOT / "docs" / rel).is_file()
        or (ROOT / "docs" / rel).read_text(encoding="utf-8")
        != (tmp_path / rel).read_text(encoding="utf-8")
    ]
    extra = sorted(
        p.name
        for p in (ROOT / "docs" / "benchmarks").glob("*.md")
        if not (tmp_path / "benchmarks" / p.name).exists()
    )
    assert not behind and not extra, (
        f"run `.venv/bin/python scripts/gen_docs.py`: stale {behind}, no longer generated {extra}"
    )


def test_check_mode_names_a_stale_page(tmp_path):
    """--check exits 1 naming a page that differs, and 0 once it is rewritten."""
    gen = _gen_docs()
    assert gen.main(["--out", str(tmp_path)]) == 0
    assert gen.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "cli.md").write_text("old\n", encoding="utf-8")
    (tmp_path / "benchmarks" / "gone.md").write_text(
        "a family that no longer exists\n", encoding="utf-8"
    )
    assert gen.stale(tmp_path, gen.pages()) == ["benchmarks/gone.md", "cli.md"]
    assert gen.main(["--out", str(tmp_path), "--check"]) == 1


def test_every_benchmark_and_command_has_its_page():
    """Each registered benchmark has a section on its family's page; each command one in the reference."""
    from grandrounds.core.registry import BENCHMARKS

    gen = _gen_docs()
    pages = gen.pages()
    for name in BENCHMARKS.names():
        module = BENCHMARKS.get(name).__module__.rsplit(".", 1)[-1]
        assert f"## `{name}`" in pages[f"benchmarks/{module}.md"], name
    for command in (
        "run",
        "demo",
        "list",
        "regrade",
        "leaderboard",
        "report",
        "view",
        "irt",
        "robustness",
        "validate-judge",
    ):
        assert f"## `grandrounds {command}`" in pages["cli.md"], command
    assert "`--judge-concurrency`" in pages["cli.md"]


def test_family_page_shows_protocol_and_official_files():
    """HealthBench's page names its judge, its official grader file at its pinned commit, and its breakdowns."""
    page = _gen_docs().pages()["benchmarks/healthbench.md"]
    assert "`openai/gpt-4.1-2025-04-14`" in page
    assert "openai/simple-evals" in page and "healthbench\\_eval.py" in page
    assert "ee3b0318d8d1" in page
    assert "`theme`" in page and "`axis`" in page
    assert "### Protocol `reference` (the default)" in page and "### Protocol `grandrounds`" in page


def test_markdown_escaping_keeps_code_and_neutralises_html():
    gen = _gen_docs()
    assert gen.text("a <script> | b `x|<y>` *c*") == "a &lt;script&gt; \\| b `x|<y>` \\*c\\*"
    assert gen.code("a`b") == "``a`b``"


# ---- the site build ----------------------------------------------------------------------------


def test_mkdocs_build_is_strict_and_counts_pages(tmp_path):
    """`mkdocs build --strict` succeeds (a broken link or a page left out of the nav fails it)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        msg = "mkdocs is not installed (bash scripts/setup.sh dev installs it)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    site = tmp_path / "site"
    r = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    sources = list((ROOT / "docs").rglob("*.md"))
    assert len(list(site.rglob("index.html"))) == len(
        sources
    )  # one page each: no two sources built to one address


def test_mkdocs_strict_fails_on_a_broken_link(tmp_path):
    """The check is real: a page linking to a missing page makes the strict build fail."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        msg = "mkdocs is not installed (bash scripts/setup.sh dev installs it)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[gone](missing.md)\n", encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = re.sub(r"(?ms)^nav:.*?(?=^\S|\Z)", "nav:\n  - Home: index.md\n", config)
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    r = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode != 0 and "missing.md" in r.stderr


# ---- the README and the scripts ----------------------------------------------------------------


def test_readme_is_a_front_page_whose_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 220
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_ci_runs_the_readme_test_command():
    """.ci/run runs scripts/test.sh, the README's second command."""
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_setup_says_what_it_builds_and_shows_time(tmp_path):
    """The long install prints what it builds and that it takes minutes, then elapsed time while it runs,
    then how long it took: here with a stand-in pip that takes a little over a second."""
    venv_bin = tmp_path / "repo" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (tmp_path / "repo" / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "repo" / "scripts" / "setup.sh")
    (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n', encoding="utf-8")
    python = venv_bin / "python"
    # a first install: llama_cpp not importable yet, and the editable install takes 2.5 s
    python.write_text(
        "#!/bin/sh\ncase \"$*\" in *'import llama_cpp'*) exit 1;;"
        " *'-e .'*) echo \"$CMAKE_ARGS\" > cmake_args; echo '[57/140] Building CXX object'; sleep 2.5;; esac\nexit 0\n",
        encoding="utf-8",
    )
    python.chmod(0o755)
    env = {**os.environ, "SETUP_TICK": "1", "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", "scripts/setup.sh"],
        cwd=tmp_path / "repo",
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "llama.cpp" in out and "several minutes" in out
    assert re.search(r"still building .*: \d+:\d\d elapsed", out), out
    assert re.search(r"done: building .* in \d+:\d\d", out), out
    assert "compiling step 57/140" in out, out  # the compiler's progress, read from the build log
    # llama.cpp built portable: never for this processor only
    assert "-DGGML_NATIVE=OFF" in (tmp_path / "repo" / "cmake_args").read_text()


# ---- the demo's closing lines ------------------------------------------------------------------


class _LocalStandIn(ScriptedProvider):
    """Stands in for the local GGUF model: every answer is option A, as scores or as text."""

    def __init__(self, spec, script=None, **options):
        super().__init__(spec, script=self.answer_a, **options)

    @staticmethod
    def answer_a(req):
        if req.kind == "chat":
            return "Answer: A"
        return {
            c: (0.0 if c.strip() == "A" else -3.0)
            for c in (req.continuations or ("A", "B", "C", "D"))
        }


def test_demo_ends_with_what_its_numbers_mean(tmp_path):
    """`grandrounds demo` closes with chance level (from its questions' option counts), each score
    against it, which protocol ran and what its `*` means (the deviation named), and three commands."""
    records = [
        json.loads(line)
        for line in DEMO_FILE.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    share_a = sum(r["answer_idx"] == "A" for r in records) / len(records)
    with PROVIDERS.registered("llamacpp", _LocalStandIn):
        r = CliRunner().invoke(
            app, ["demo", "--store", str(tmp_path / "s.db")], env={"COLUMNS": "200"}
        )
    assert r.exit_code == 0, r.output
    tail = r.output[r.output.index("What these numbers mean") :].splitlines()
    assert f"the share of the {len(records)} questions answered right" in tail[1]
    assert (
        "Each question has 4 options, so guessing scores 0.25 on average (chance level)" in tail[1]
    )
    for mode in ("next-token", "generate"):
        [line] = [x for x in tail if x.startswith(f"  {mode}: ")]
        assert line.startswith(f"  {mode}: {share_a:.3f}, 95% CI [")
    assert any(
        x.startswith("  protocol grandrounds*: our protocol") and "max_tokens 1024 -> 64" in x
        for x in tail
    ), tail
    commands = tail[tail.index("Next, try") + 1 :]
    assert len(commands) == 3 and all(c.startswith("  grandrounds ") for c in commands), commands


def test_demo_notes_place_a_score_against_chance():
    """Above, below and indistinguishable from chance are told apart by the interval, an unscored
    result is not shown as a number, and chance follows the option counts."""

    class R:
        metric = "accuracy"
        model = "openai/m"

        def __init__(self, score, ci95, n=100):
            self.score, self.ci95, self.n = score, ci95, n
            self.fingerprint = {
                "answer_mode": "generate",
                "protocol": {"name": "reference", "deviations": {}},
            }

    assert chance_level([2, 4]) == pytest.approx(0.375)
    lines = demo_notes(
        [R(0.9, (0.8, 0.95)), R(0.1, (0.05, 0.2)), R(0.3, (0.2, 0.4)), R(None, None)], [4, 4, 4, 4]
    )
    scores = [x for x in lines if x.startswith("  generate: ")]
    assert "above chance" in scores[0] and "below chance" in scores[1]
    assert (
        "not distinguishable from guessing" in scores[2]
        and "no score" in scores[3]
        and "0.000" not in scores[3]
    )
    assert any(x.startswith("  protocol reference: the official setup") for x in lines)
    assert not any("SmolLM2" in x for x in lines)  # another model: no word about the demo's model
    judged = R(0.5, (0.4, 0.6))
    judged.fingerprint = {
        "answer_mode": "generate",
        "protocol": {
            "name": "grandrounds",
            "deviations": {"judges": {"openai/j": {"temperature": {"preset": 0.5, "used": 0.0}}}},
        },
    }
    [line] = [x for x in demo_notes([judged], [4]) if x.startswith("  protocol ")]
    assert (
        line.startswith("  protocol grandrounds*: our protocol")
        and "judge openai/j temperature 0.5 -> 0.0" in line
    )


def test_home_page_shows_the_install_and_links_agents_trust_and_cpu():
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    install = home.split("## Install", 1)[1].split("## ", 1)[0]
    assert "bash scripts/demo.sh" in install and "bash scripts/test.sh" in install
    for page in ("agents.md", "trust.md", "cpu.md"):
        assert f"]({page})" in home, page
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "What runs on a CPU: cpu.md" in nav


def test_user_docs_name_no_local_reference_folder():
    """Users never have the project's ../shared folder: no user page points at it (the
    development and architecture pages describe the project's own test set-up)."""
    own = {"development.md", "ARCHITECTURE.md"}
    pages = [p for p in (ROOT / "docs").rglob("*.md") if p.name not in own]
    assert len(pages) > 40
    assert [p.name for p in pages if "../shared" in p.read_text(encoding="utf-8")] == []


def test_cpu_page_states_the_speeds_the_estimate_uses():
    from grandrounds.run import local_time

    page = (ROOT / "docs" / "cpu.md").read_text(encoding="utf-8")
    flat = " ".join(page.split())
    lt = local_time
    assert f"reads {lt.PREFILL_TOKENS_PER_S:g} tokens/s" in flat
    assert f"writes {lt.DECODE_TOKENS_PER_S:g} to {lt.QUICK_DECODE_TOKENS_PER_S:g} tokens/s" in flat
