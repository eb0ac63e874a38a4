"""MedBullets op4 and op5: the real files, a scripted model scored against the CSV's own key, bad rows, downloads."""

from __future__ import annotations

import asyncio
import csv
import hashlib
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks import medbullets as mb
from grandrounds.benchmarks.base import RemoteFile, RunOptions
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Request
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run.config import RunConfig, check_run
from grandrounds.run.runner import run
from grandrounds.sources.data import resolve
from grandrounds.store import Store
from tests.conftest import shared_file

OPTION_COLUMNS = {"A": "opa", "B": "opb", "C": "opc", "D": "opd", "E": "ope"}


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The file read with the csv module alone: the independent account of what it holds."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def published(n: int) -> Path:
    return shared_file("medbullets", f"medbullets_op{n}.csv")


# ---- the real files ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [4, 5])
def test_real_file_loads_every_question_with_its_options_key_and_explanation(n: int) -> None:
    path = published(n)
    rows = csv_rows(path)
    bench = mb.MedBullets(options=n)
    samples = bench.load(path.parent)

    assert len(rows) == 308 and len(samples) == 308
    letters = "ABCDE"[:n]
    assert all(list(s.choices) == list(letters) for s in samples)
    assert [s.target for s in samples] == [r["answer_idx"] for r in rows]
    assert Counter(s.target for s in samples) == Counter(r["answer_idx"] for r in rows)
    for s, r in zip(samples, rows):
        assert s.choices == {k: r[OPTION_COLUMNS[k]] for k in letters}
        assert s.choices[s.target] == r["answer"]
        assert s.metadata["explanation"] == r["explanation"] and s.metadata["explanation"].strip()
        assert s.metadata["link"] == r["link"] and s.metadata["question"] == r["question"]
    assert len({s.id for s in samples}) == 308
    assert bench.dataset_hash(path.parent) == bench.file.sha256 == bench.remote_files[0].sha256
    assert bench.load(path) == samples  # the file itself, or its folder


def test_op4_and_op5_hold_the_same_questions_under_the_same_ids() -> None:
    four = {s.id: s for s in mb.MedBullets(options=4).load(published(4))}
    five = {s.id: s for s in mb.MedBullets(options=5).load(published(5))}
    assert four.keys() == five.keys()
    for sid, s4 in four.items():
        s5 = five[sid]
        assert s4.metadata["question"] == s5.metadata["question"]
        assert s4.choices[s4.target] == s5.choices[s5.target]  # same key text, letters may differ
        assert set(s4.choices.values()) < set(s5.choices.values())  # op5 adds one option
        assert s4.metadata["explanation"] == s5.metadata["explanation"]


def test_published_checksums_are_the_source_notes_ones() -> None:
    notes = shared_file("medbullets", "SOURCE.md").read_text(encoding="utf-8")
    for n, rf in mb.FILES.items():
        assert rf.sha256 in notes
        assert hashlib.sha256(published(n).read_bytes()).hexdigest() == rf.sha256
        assert rf.url.startswith(
            f"https://raw.githubusercontent.com/{mb.REPO}/{mb.COMMIT}/medbullets/"
        )


# ---- a scripted model, scored against the CSV's answer column ----------------------------------


def longest_option(choices: dict[str, str]) -> str:
    """The scripted model's rule: the letter of the longest option text (first one on a tie)."""
    return max(choices, key=lambda k: len(choices[k]))


def options_in_prompt(prompt: str, letters: str) -> dict[str, str]:
    """The options as the model sees them: the prompt's "X. text" lines."""
    out = {}
    for line in prompt.splitlines():
        if len(line) > 2 and line[0] in letters and line[1:3] == ". ":
            out[line[0]] = line[3:]
    return out


@pytest.mark.parametrize("n", [4, 5])
def test_scripted_model_accuracy_equals_the_one_computed_from_the_csv(
    tmp_path: Path, n: int
) -> None:
    path = published(n)
    rows = csv_rows(path)
    letters = "ABCDE"[:n]
    failing, unreadable = (
        rows[0]["question"],
        rows[1]["question"],
    )  # one failed call, one reply with no letter

    def script(req: Request) -> str:
        prompt = req.messages[-1].content
        if failing in prompt:
            return RuntimeError("upstream 500")  # type: ignore[return-value]
        if unreadable in prompt:
            return "I would need to examine the patient before choosing."
        return f"The most detailed option is the safest guess.\nAnswer: {longest_option(options_in_prompt(prompt, letters))}"

    with Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="medbullets",
            model="scripted/longest",
            bench_params={"options": n},
            data=path,
            provider_options={"script": script},
        )
        out = asyncio.run(run(st, cfg))

    # Independently: the rule applied to each CSV row, compared with its answer_idx column.
    right = [
        longest_option({k: r[OPTION_COLUMNS[k]] for k in letters}) == r["answer_idx"] for r in rows
    ]
    answered = right[1:]  # the first question's call failed
    answered[0] = False  # the second reply names no letter: wrong under both protocols
    result = out.result
    assert (
        result.n == 308 and result.n_unscored == 0
    )  # reference: every question in the denominator
    assert result.score == pytest.approx(sum(answered) / 308)
    other = result.extra["other_protocol"]
    assert other["protocol"] == "grandrounds" and other["score"] == pytest.approx(
        sum(answered) / 307
    )
    assert result.extra["n_unextracted"] == 1 and result.extra["n_unscored_counted_wrong"] == 1
    assert result.fingerprint["benchmark"] == (
        "medbullets" if n == 5 else 'medbullets{"options":4}'
    )
    assert result.fingerprint["dataset_sha256"] == mb.FILES[n].sha256
    assert all(s.metadata["explanation"] for s in out.samples)  # kept with every stored question
    by_id = {g.sample_id: g for g in out.grades}
    assert by_id[out.samples[2].id].value == float(right[2])


def test_protocols_share_the_prompt_and_differ_in_aggregation() -> None:
    bench = mb.MedBullets()
    sample = bench.load(published(5))[0]
    ref = bench.prompt(sample, RunOptions(protocol="reference")).messages
    ours = bench.prompt(sample, RunOptions(protocol="grandrounds")).messages
    assert ref == ours and "E. " in ref[0].content and "(A/B/C/D/E)" in ref[0].content
    assert bench.protocols["reference"].answer.temperature == 0.0
    assert "every question" in bench.protocols["reference"].aggregation
    assert "excluded" in bench.protocols["grandrounds"].aggregation
    assert bench.upstream_files() == ()  # nothing official is read: none is pinned for MedBullets
    with pytest.raises(ConfigError, match="letter-loglik"):
        check_run(
            RunConfig(
                benchmark="medbullets",
                model="scripted/x",
                options=RunOptions(answer_mode="letter-loglik"),
            )
        )


def test_options_parameter_picks_the_file_and_is_checked() -> None:
    assert BENCHMARKS.get("medbullets") is mb.MedBullets
    assert mb.MedBullets().remote_files == (mb.FILES[5],)
    assert mb.MedBullets(options="4").remote_files == (mb.FILES[4],)  # as typed on the command line
    assert str(mb.MedBullets(options=5).spec()) == "medbullets"
    with pytest.raises(ConfigError, match="options"):
        mb.MedBullets(options=3)


# ---- bad rows -----------------------------------------------------------------------------------

HEADER5 = [
    "link",
    "question",
    "opa",
    "opb",
    "opc",
    "opd",
    "ope",
    "answer_idx",
    "answer",
    "explanation",
]


def good_row(i: int) -> list[str]:
    return [
        f"https://step2.medbullets.com/testview?qid={1000 + i}",
        f"A patient, case {i}.\nWhat next?",
        "Aspirin",
        "Heparin",
        "Warfarin",
        "Observation",
        "Surgery",
        "B",
        "Heparin",
        f"Because {i}.\n\nMore.",
    ]


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.__setitem__(7, "F"), "answer_idx 'F' is not one of the options A, B, C, D, E"),
        (
            lambda r: r.__setitem__(7, "BC"),
            "answer_idx 'BC' is not one of the options A, B, C, D, E",
        ),
        (
            lambda r: r.__setitem__(8, "Warfarin"),
            "answer text 'Warfarin' is not option B ('Heparin')",
        ),
        (lambda r: r.__setitem__(4, "  "), "empty 'opc'"),
        (lambda r: r.__setitem__(0, ""), "empty 'link'"),
        (lambda r: r.append("stray"), "11 cells, the header has 10"),
        (lambda r: r.__delitem__(9), "9 cells, the header has 10"),
    ],
)
def test_a_bad_row_is_one_line_naming_file_and_line(tmp_path: Path, change, message: str) -> None:
    rows = [good_row(i) for i in range(3)]
    change(rows[2])
    path = write_csv(tmp_path / "medbullets_op5.csv", HEADER5, rows)
    with pytest.raises(DataError) as exc:
        mb.MedBullets().load(tmp_path)
    text = str(exc.value)
    # rows 0 and 1 span lines 2-5 and 6-9 (one newline in the stem, two in the explanation): the bad
    # row starts on line 10
    assert text == f"{path}, line 10: {message}" and "\n" not in text


def test_file_level_errors(tmp_path: Path) -> None:
    op5 = write_csv(tmp_path / "op5.csv", HEADER5, [good_row(0)])
    with pytest.raises(
        DataError, match=r"op5.csv, line 1: unexpected column 'ope'.*--param options=5"
    ):
        mb.MedBullets(options=4).load(op5)
    no_ope = write_csv(
        tmp_path / "op4.csv",
        [h for h in HEADER5 if h != "ope"],
        [good_row(0)[:6] + good_row(0)[7:]],
    )
    assert len(mb.MedBullets(options=4).load(no_ope)) == 1
    with pytest.raises(DataError, match=r"op4.csv, line 1: missing columns: ope"):
        mb.MedBullets(options=5).load(no_ope)
    twice = write_csv(tmp_path / "twice.csv", HEADER5, [good_row(0), good_row(0)])
    with pytest.raises(DataError, match="'qid-1000'.*duplicate id"):
        mb.MedBullets().load(twice)
    with pytest.raises(DataError, match="no questions"):
        mb.MedBullets().load(write_csv(tmp_path / "empty.csv", HEADER5, []))
    with pytest.raises(DataError, match=r"expected medbullets_op5.csv"):
        mb.MedBullets().load(tmp_path)


@pytest.mark.parametrize(
    "link, sid",
    [
        ("https://step2.medbullets.com/testview?qid=217175", "qid-217175"),
        ("https://bit.ly/47KxMQs", "bitly-47KxMQs"),
        (" https://example.org/q/9 ", "https://example.org/q/9"),
    ],
)
def test_question_ids_come_from_the_link(link: str, sid: str) -> None:
    assert mb.question_id(link) == sid


# ---- the public file: downloaded, checksum-checked ----------------------------------------------


def test_download_is_checked_against_the_published_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    real = published(4).read_bytes()
    (served / "good.csv").write_bytes(real)
    (served / "tampered.csv").write_bytes(real.replace(b"Purkinje", b"Purkynje", 1))
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))

    monkeypatch.setitem(
        mb.FILES,
        4,
        RemoteFile((served / "tampered.csv").as_uri(), "medbullets_op4.csv", mb.FILES[4].sha256),
    )
    with pytest.raises(DataError, match="checksum mismatch"):
        resolve(mb.MedBullets(options=4), None)
    assert not (tmp_path / "cache" / "medbullets" / "medbullets_op4.csv").exists()

    monkeypatch.setitem(
        mb.FILES,
        4,
        RemoteFile((served / "good.csv").as_uri(), "medbullets_op4.csv", mb.FILES[4].sha256),
    )
    bench = mb.MedBullets(options=4)
    root = resolve(bench, None)
    assert root == tmp_path / "cache" / "medbullets" and len(bench.load(root)) == 308
    assert bench.dataset_hash(root) == mb.FILES[4].sha256
