"""Sources that work offline and behind firewalls: mirrors, ``grandrounds fetch``, bundles.

A loopback HTTP server stands in for a mirror, serving the real files of ../shared/data and
../shared/reference under raw-GitHub paths. Runs "offline" have every proxy variable pointing at a
closed port, so any download would fail; the process's own count of download attempts
(``sources.mirrors.download_attempts``) must not grow.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.fetch import upstream_files_of
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.records import Request
from grandrounds.core.registry import BENCHMARKS, PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.sources import downloads, mirrors, upstream
from grandrounds.sources.downloads import RemoteFile
from tests.conftest import ROOT, SHARED_REFERENCE, shared_file

GITHUB = "https://raw.githubusercontent.com"
#: A closed port on loopback: any request sent through these proxies fails at once.
NOWHERE = "http://127.0.0.1:9"
OFFLINE = {
    "HTTP_PROXY": NOWHERE,
    "HTTPS_PROXY": NOWHERE,
    "http_proxy": NOWHERE,
    "https_proxy": NOWHERE,
    "NO_PROXY": "",
    "no_proxy": "",
}
MIRROR_VARS = (
    mirrors.MIRROR_ENV,
    mirrors.GITHUB_MIRROR_ENV,
    mirrors.HF_ENDPOINT_ENV,
    mirrors.BUNDLE_ENV,
)


class Mirror:
    """Files served by URL path; every request counted."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.hits: list[str] = []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                mirror.hits.append(self.path)
                path = mirror.files.get(self.path)
                if path is None:
                    self.send_error(404)
                    return
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Mirror:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def github_files(bench_name: str, data_file: Path, prefix: str) -> dict[str, Path]:
    """``bench_name``'s data file and official files under ``prefix`` + their raw-GitHub path."""
    bench = BENCHMARKS.get(bench_name)()
    files = {prefix + bench.remote_files[0].url.removeprefix(GITHUB): data_file}
    for f in upstream_files_of(bench):
        files[prefix + f.url.removeprefix(GITHUB)] = SHARED_REFERENCE / f.folder / f.path
    return files


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """A fresh cache, no reference folder, no mirror or bundle set, nothing remembered in this process."""
    for var in (*MIRROR_VARS, "GRANDROUNDS_REFERENCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    forget()
    yield
    forget()


def forget() -> None:
    upstream.forget_failed_downloads()
    upstream._source.cache_clear()
    mirrors._manifests.clear()


def offline(monkeypatch) -> None:
    for var in MIRROR_VARS:
        monkeypatch.delenv(var, raising=False)
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    forget()


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    return r.exit_code, r.stdout, r.stderr


# ---- the bots: a candidate answering by a rule, a judge answering by a rule ----------------------


def candidate(req: Request) -> str:
    text = req.messages[-1].text
    letters = re.findall(r"^([A-E])[.)]", text, re.M)
    return f"Answer: {letters[len(text) % len(letters)]}" if letters else "Drink water and rest."


def judge(req: Request) -> str:
    item = re.search(r"\[(-?\d+(?:\.\d+)?)\] (.*?)\n", req.messages[-1].text)
    met = item is not None and len(item.group(2)) % 2 == 0
    return "```json\n" + json.dumps({"explanation": "by rule", "criteria_met": met}) + "\n```"


@contextmanager
def bots() -> Iterator[None]:
    class Cand(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=candidate, **options)

    class Judge(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=judge, **options)

    with PROVIDERS.registered("offcand", Cand), PROVIDERS.registered("offjudge", Judge):
        yield


def run_scores(tmp: Path, tag: str, runs: dict[str, list[str]]) -> dict[str, float]:
    """Each benchmark run (``--limit 20``, reference protocol) through the CLI; its score."""
    scores = {}
    for bench, extra in runs.items():
        out = tmp / f"{tag}-{bench}"
        code, stdout, stderr = cli(
            "run",
            bench,
            "--model",
            "offcand/x",
            "--limit",
            "20",
            "--store",
            str(tmp / f"{tag}.db"),
            "--out",
            str(out),
            *extra,
        )
        assert code == 0, stderr + stdout
        scores[bench] = json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][
            0
        ]["score"]
    return scores


# ---- mirrors ---------------------------------------------------------------------------------------


def test_mirror_url_shapes(monkeypatch):
    url = f"{GITHUB}/org/repo/abc/data/x.jsonl"
    for var in MIRROR_VARS:
        monkeypatch.delenv(var, raising=False)
    assert mirrors.mirrored(url) == url
    monkeypatch.setenv(
        mirrors.GITHUB_MIRROR_ENV, "https://ghproxy.example/https://raw.githubusercontent.com/"
    )
    assert (
        mirrors.mirrored(url)
        == "https://ghproxy.example/https://raw.githubusercontent.com/org/repo/abc/data/x.jsonl"
    )
    monkeypatch.setenv(mirrors.GITHUB_MIRROR_ENV, "https://raw.gitmirror.example")
    assert mirrors.mirrored(url) == "https://raw.gitmirror.example/org/repo/abc/data/x.jsonl"
    hf = "https://huggingface.co/datasets/o/d/resolve/main/t.parquet"
    monkeypatch.setenv(mirrors.HF_ENDPOINT_ENV, "https://hf-mirror.example")
    assert mirrors.mirrored(hf) == "https://hf-mirror.example/datasets/o/d/resolve/main/t.parquet"
    blob = "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/x.jsonl"
    assert mirrors.mirrored(blob) == blob
    monkeypatch.setenv(mirrors.MIRROR_ENV, "http://files.example/mirror")
    assert (
        mirrors.mirrored(blob)
        == "http://files.example/mirror/openaipublic.blob.core.windows.net/simple-evals/healthbench/x.jsonl"
    )
    assert mirrors.mirrored(url).startswith("https://raw.gitmirror.example/"), (
        "the GitHub setting wins over the generic one"
    )
    assert (
        mirrors.mirrored("https://huggingface.co.evil.example/x")
        == "http://files.example/mirror/huggingface.co.evil.example/x"
    )


def test_mirror_download_still_checked_against_pinned_sha256(clean, tmp_path):
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"not": "the file"}\n', encoding="utf-8")
    rf = RemoteFile(f"{GITHUB}/o/r/c/x.jsonl", "x.jsonl", "0" * 64)
    with Mirror({"/gh/o/r/c/x.jsonl": wrong}) as m, pytest.MonkeyPatch.context() as mp:
        mp.setenv(mirrors.GITHUB_MIRROR_ENV, m.url + "/gh")
        with pytest.raises(DataError, match="checksum mismatch"):
            downloads.fetch(rf, tmp_path / "dest")
        assert m.hits == ["/gh/o/r/c/x.jsonl"]
    assert not (tmp_path / "dest" / "x.jsonl").exists(), (
        "a file that fails its checksum is never kept"
    )


def test_fetch_through_a_mirror_then_run_offline(clean, monkeypatch, tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    files = github_files("medqa", data, "/https://raw.githubusercontent.com")
    with Mirror(files) as m:
        code, out, err = cli(
            "fetch", "medqa", "--github-mirror", f"{m.url}/https://raw.githubusercontent.com"
        )
        assert code == 0, err + out
        assert set(m.hits) == set(files), "the data and every official file came through the mirror"
        line = next(x for x in out.splitlines() if "phrases_no_exclude_test.jsonl" in x)
        assert "fetched" in line and f"{data.stat().st_size:,} bytes" in line
        assert (
            "c3b905ccfa66152dc25afbcb2c10e86c0bdb208824f0658fcdb2c040f60a2beb" in line
            and m.url in line
        )
        assert "simple-evals/common.py: fetched" in out
        hits = len(m.hits)
        code, out, err = cli(
            "fetch", "medqa", "--github-mirror", f"{m.url}/https://raw.githubusercontent.com"
        )
        assert code == 0 and len(m.hits) == hits, "a second fetch asks nothing"
        assert (
            "phrases_no_exclude_test.jsonl: cached" in out
            and "simple-evals/common.py: cached" in out
        )
    offline(monkeypatch)
    before = len(mirrors.download_attempts())
    with bots():
        scores = run_scores(tmp_path, "offline", {"medqa": []})
    assert mirrors.download_attempts()[before:] == []
    assert scores["medqa"] is not None


def fresh(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """``grandrounds ARGS`` in a new process (nothing read before), with an empty cache, no reference
    folder, and every proxy variable pointing nowhere."""
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "COLUMNS": "250",
        "GRANDROUNDS_CACHE": str(tmp_path / "fresh-cache"),
        **OFFLINE,
    }
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return r.returncode, r.stdout, r.stderr


def test_first_run_offline_names_every_way_out(tmp_path):
    code, out, err = fresh(
        tmp_path,
        "run",
        "medqa",
        "--model",
        "scripted/x",
        "--limit",
        "2",
        "--store",
        str(tmp_path / "s.db"),
        "--data",
        str(shared_file("medqa", "phrases_no_exclude_test.jsonl")),
    )
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "download failed" in line
    for way in (
        "grandrounds fetch",
        "grandrounds bundle --out DIR",
        mirrors.BUNDLE_ENV,
        mirrors.GITHUB_MIRROR_ENV,
        mirrors.MIRROR_ENV,
        "--protocol grandrounds",
    ):
        assert way in line, way


def test_bundle_runs_with_no_download_and_the_same_scores(clean, monkeypatch, tmp_path):
    medqa = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    hb = shared_file("healthbench", "healthbench_500.jsonl")
    judged = ["--judge", "offjudge/j"]
    # the ordinary path: local data files, official files from the reference folder
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(SHARED_REFERENCE))
    with bots():
        online = run_scores(
            tmp_path,
            "online",
            {"medqa": ["--data", str(medqa)], "healthbench": ["--data", str(hb), *judged]},
        )
    # the bundle: MedQA's data through the mirror, HealthBench's from a local file, official files from the reference folder
    bundle = tmp_path / "carry"
    with Mirror(github_files("medqa", medqa, "/gh")) as m:
        code, out, err = cli(
            "bundle",
            "--out",
            str(bundle),
            "medqa",
            "healthbench",
            "--data",
            f"healthbench={hb}",
            "--github-mirror",
            f"{m.url}/gh",
        )
        assert code == 0, err + out
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["files"]["data/medqa/phrases_no_exclude_test.jsonl"]["sha256"].startswith(
        "c3b905cc"
    )
    assert manifest["data"]["healthbench"]["path"] == "data/healthbench/local/healthbench_500.jsonl"
    assert "reference/simple-evals/healthbench_eval.py" in manifest["files"]
    # the other machine: no reference folder, an empty cache, every network variable pointing nowhere
    monkeypatch.delenv("GRANDROUNDS_REFERENCE")
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "empty-cache"))
    offline(monkeypatch)
    before = len(mirrors.download_attempts())
    with bots():
        bundled = run_scores(
            tmp_path,
            "bundled",
            {"medqa": ["--bundle", str(bundle)], "healthbench": ["--bundle", str(bundle), *judged]},
        )
    assert mirrors.download_attempts()[before:] == [], "a bundled run tries no download"
    assert bundled == online and None not in bundled.values()
    assert 0 < bundled["medqa"] < 1 and 0 < bundled["healthbench"] < 1, (
        "scores that could tell a difference"
    )


def test_bundle_file_changed_or_absent_is_refused(clean, monkeypatch, tmp_path):
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(SHARED_REFERENCE))
    bundle = tmp_path / "b"
    hb = shared_file("healthbench", "healthbench_500.jsonl")
    code, out, err = cli(
        "bundle", "--out", str(bundle), "healthbench", "--data", f"healthbench={hb}"
    )
    assert code == 0, err + out
    monkeypatch.delenv("GRANDROUNDS_REFERENCE")
    monkeypatch.setenv(mirrors.BUNDLE_ENV, str(bundle))
    forget()
    before = len(mirrors.download_attempts())
    f = upstream_files_of(BENCHMARKS.get("healthbench")())[0]
    assert upstream.local_path(f) == bundle / upstream.bundle_path(f)
    target = bundle / upstream.bundle_path(f)
    target.write_text(target.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    with pytest.raises(DataError, match="does not match the bundle manifest") as e:
        upstream.local_path(f)
    assert str(target) in str(e.value)
    other = upstream_files_of(BENCHMARKS.get("medqa")())[0]
    with pytest.raises(DataError, match="not in the bundle") as e:
        upstream.local_path(other)
    assert "grandrounds bundle --out DIR BENCHMARK" in str(e.value)
    with pytest.raises(DataError, match="not in the bundle"):
        downloads.fetch(RemoteFile(f"{GITHUB}/o/r/c/x.jsonl", "x.jsonl", None), tmp_path / "d")
    assert mirrors.download_attempts()[before:] == []


def test_bundle_adds_to_an_existing_bundle(clean, monkeypatch, tmp_path):
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(SHARED_REFERENCE))
    bundle = tmp_path / "b"
    hb = shared_file("healthbench", "healthbench_500.jsonl")
    assert cli("bundle", "--out", str(bundle), "healthbench", "--data", f"healthbench={hb}")[0] == 0
    first = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))["files"]
    meq = shared_file("medeqbench", "med_eq.csv")
    code, out, err = cli(
        "bundle", "--out", str(bundle), "medeqbench", "--data", f"medeqbench={meq}"
    )
    assert code == 0, err + out
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert first.items() <= manifest["files"].items()
    assert manifest["benchmarks"] == ["healthbench", "medeqbench"]
    assert "reference/medeqbench/Health_EQBench/Health_EQBench.py" in manifest["files"]


def test_bundle_option_without_a_manifest_is_one_line(clean, tmp_path):
    code, out, err = cli("run", "medqa", "--model", "offcand/x", "--bundle", str(tmp_path))
    assert (
        code == 2
        and err.strip()
        == f"error: --bundle {tmp_path}: no manifest.json there; write one with `grandrounds bundle --out {tmp_path} BENCHMARK`"
    )


def test_dry_run_offline_says_why_it_needs_the_official_file(tmp_path):
    data = str(shared_file("medqa", "phrases_no_exclude_test.jsonl"))
    code, out, err = fresh(
        tmp_path,
        "run",
        "medqa",
        "--model",
        "scripted/x",
        "--limit",
        "2",
        "--data",
        data,
        "--dry-run",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert code == 2, err
    assert (
        "a dry run needs the file too: it counts the tokens of the exact prompts" in err
        and "--protocol grandrounds" in err
    )
    code, out, err = fresh(
        tmp_path,
        "run",
        "medqa",
        "--model",
        "scripted/x",
        "--limit",
        "2",
        "--data",
        data,
        "--dry-run",
        "--protocol",
        "grandrounds",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert code == 0, err + out
