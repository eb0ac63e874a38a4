"""VQA-RAD and SLAKE: loading the real files with their images, the scoring each figure names, the
peers' metric bugs not reproduced, the normalisation against lmms-eval's own function, images in
request keys (hash, never bytes) and in the store, and the blind / blank image probes."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from grandrounds.analyses.robustness import run_probes, summarize_set
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.vqa import SLAKE, VQARAD
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import ImagePart, Message, Request, TextPart
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.scoring.vqa import closed_by_yes_no, normalize, token_recall
from grandrounds.store import Store
from grandrounds.store.images import ImageStore
from tests.conftest import shared_file
from tests.official import load_official


def vqa_rad() -> Path:
    return shared_file("vqa-rad", "VQA_RAD Dataset Public.json").parent


def slake() -> Path:
    return shared_file("slake", "test.json").parent


def test_vqa_rad_test_split_has_the_counts_of_its_source() -> None:
    b = VQARAD()
    samples = b.load(vqa_rad())
    assert len(samples) == 451
    assert len({s.metadata["image_sha256"] for s in samples}) == 203
    assert sum(s.metadata["closed"] is True for s in samples) == 272
    assert sum(s.metadata["closed"] is False for s in samples) == 179
    assert sum(s.metadata["closed_yes_no"] for s in samples) == 251
    first = samples[0]
    (msg,) = first.messages
    image, text = msg.content
    assert isinstance(image, ImagePart) and isinstance(text, TextPart)
    raw = (vqa_rad() / "VQA_RAD Image Folder" / "synpic42202.jpg").read_bytes()
    assert (
        image.sha256 == hashlib.sha256(raw).hexdigest() and image.data == raw
    )  # sent as the file holds it
    assert (
        text.text
        == "Is there evidence of an aortic aneurysm?\nAnswer the question using a single word or phrase."
    )
    assert b.images.bytes_read == sum(
        p.stat().st_size
        for p in {vqa_rad() / "VQA_RAD Image Folder" / s.metadata["image"] for s in samples}
    )


@pytest.mark.parametrize(
    "lang, n, images, closed, yes_no", [("en", 1061, 96, 416, 355), ("zh", 1033, 96, 420, 354)]
)
def test_slake_halves_have_the_counts_of_its_source(
    lang: str, n: int, images: int, closed: int, yes_no: int
) -> None:
    samples = SLAKE(lang=lang).load(slake())
    assert len(samples) == n
    assert len({s.metadata["image_sha256"] for s in samples}) == images
    assert sum(s.metadata["closed"] is True for s in samples) == closed
    assert sum(s.metadata["closed_yes_no"] for s in samples) == yes_no
    assert {s.metadata["lang"] for s in samples} == {lang}


def test_an_image_request_key_holds_the_hash_never_the_bytes() -> None:
    data = b"\xff\xd8" + b"x" * 1000
    part = ImagePart(
        sha256=hashlib.sha256(data).hexdigest(),
        media_type="image/jpeg",
        data=data,
        width=10,
        height=10,
    )
    req = Request(provider="openai", model="m", messages=(Message("user", (part, TextPart("q"))),))
    assert (
        part.sha256 in req.canonical()
        and "eHh4" not in req.canonical()
        and "xxx" not in req.canonical()
    )
    same = Request(
        provider="openai",
        model="m",
        messages=(
            Message(
                "user", (ImagePart(sha256=part.sha256, media_type="image/jpeg"), TextPart("q"))
            ),
        ),
    )
    assert same.key() == req.key()  # the bytes travel beside the key
    other = Request(
        provider="openai",
        model="m",
        messages=(
            Message("user", (ImagePart(sha256="0" * 64, media_type="image/jpeg"), TextPart("q"))),
        ),
    )
    assert other.key() != req.key()
    text_only = Request(provider="openai", model="m", messages=(Message("user", "q"),))
    assert '"content":"q"' in text_only.canonical()  # a text message stays a string


def test_normalisation_equals_lmms_evals_own_function() -> None:
    official = load_official(
        "lmms-eval/lmms_eval/tasks/slake/utils.py",
        [
            "EN_YES",
            "EN_NO",
            "ZH_YES",
            "ZH_NO",
            "ZH_PUNCTUATION",
            "normalize_answer",
            "_normalize_yes_no",
            "_normalize_medical_aliases",
        ],
    )
    corpus = [
        "Yes",
        "yes.",
        " YES ",
        "No",
        "no!",
        "nope",
        "True",
        "false",
        "是的",
        "不是",
        "没有",
        "包含",
        "异常",
        "正常。",
        "X-ray",
        "x ray",
        "Xray",
        "X-Ray.",
        "CT (computed tomography)",
        "MRI（磁共振）",
        "Left lung, upper lobe",
        "T2",
        "t2-weighted",
        "nodule",
        "no nodule",
        "The answer is yes",
        "",
        None,
        3,
        "  Brain   edema ",
        "肺部，右侧",
        "Answer: Liver",
        "liver\n",
        "「肝脏」",
        "Right side",
        "Both",
        "abnormal",
        "x  ray",
        "x-ray film",
    ]
    differ = [
        (x, normalize(x), official.normalize_answer(x))
        for x in corpus
        if normalize(x) != official.normalize_answer(x)
    ]
    print(
        f"\nnormalisation: {len(corpus) - len(differ)}/{len(corpus)} equal to lmms-eval's normalize_answer"
    )
    assert differ == []


def test_the_peers_metric_bugs_are_not_reproduced() -> None:
    """MedEvalKit's VQA scoring: 'no' found inside 'nodule' counts a hit; here whole answers are compared."""
    assert normalize("nodule") != normalize("no")
    assert not closed_by_yes_no("nodule") and closed_by_yes_no("No")
    assert (
        token_recall("left upper lobe", "upper lobe") == 1.0
        and token_recall("lobe", "upper lobe") == 0.5
    )


def script_by_image(answers: dict[str, str]):
    """A scripted vision model: answers from the image it was sent (the reference answer for the
    images in ``answers``), "unsure" for others and for a question sent without an image."""

    def script(req: Request) -> str:
        images = [i for m in req.messages for i in m.images]
        return answers.get(images[0].sha256, "unsure") if images else "unsure"

    return script


def expected_figures(samples, right_images: set[str]) -> dict[str, float]:
    def acc(items):
        return sum(
            s.metadata["image_sha256"] in right_images
            and normalize(s.target) != normalize("unsure")
            for s in items
        ) / len(items)

    return {
        "overall": acc(samples),
        "closed": acc([s for s in samples if s.metadata["closed"]]),
        "open": acc([s for s in samples if s.metadata["closed"] is False]),
        "closed_yn": acc([s for s in samples if s.metadata["closed_yes_no"]]),
        "open_yn": acc([s for s in samples if not s.metadata["closed_yes_no"]]),
    }


def test_vqa_rad_run_scores_what_an_independent_count_gives_and_stores_each_image_once(
    tmp_path: Path,
) -> None:
    samples = VQARAD().load(vqa_rad())
    # the model "sees" the images whose hash starts with 0-7 and answers with the first question's answer on each
    first: dict[str, str] = {}
    for s in samples:
        first.setdefault(s.metadata["image_sha256"], s.target)
    right = {h for h in first if h[0] in "01234567"}
    # a question is right when the model's answer for its image is its own answer
    answers = {h: first[h] for h in right}
    db = tmp_path / "s.db"
    cfg = RunConfig(
        benchmark="vqa-rad",
        model="scripted/vision",
        data=vqa_rad(),
        options=RunOptions(),
        provider_options={"script": script_by_image(answers)},
    )
    with Store(db) as st:
        out = asyncio.run(run(st, cfg))
    ok = [
        s
        for s in samples
        if s.metadata["image_sha256"] in right
        and normalize(first[s.metadata["image_sha256"]]) == normalize(s.target)
    ]

    def acc(items):
        return sum(s in ok for s in items) / len(items)

    r = out.result
    assert r.n == 451 and r.score == pytest.approx(acc(samples))
    assert r.extra["closed_accuracy"] == pytest.approx(
        acc([s for s in samples if s.metadata["closed"]])
    )
    assert r.extra["open_accuracy"] == pytest.approx(
        acc([s for s in samples if s.metadata["closed"] is False])
    )
    assert r.extra["closed_accuracy_yes_no_rule"] == pytest.approx(
        acc([s for s in samples if s.metadata["closed_yes_no"]])
    )
    assert r.extra["open_accuracy_yes_no_rule"] == pytest.approx(
        acc([s for s in samples if not s.metadata["closed_yes_no"]])
    )
    assert (r.extra["n_closed"], r.extra["n_open"], r.extra["n_closed_yes_no_rule"]) == (
        272,
        179,
        251,
    )
    images = ImageStore.beside(db)
    files = sorted(p for p in images.root.rglob("*") if p.is_file())
    assert len(files) == 203
    for s in samples[:20]:
        raw = (vqa_rad() / "VQA_RAD Image Folder" / s.metadata["image"]).read_bytes()
        assert images.get(s.metadata["image_sha256"], "image/jpeg") == raw
    with Store(db) as st:
        again = asyncio.run(run(st, cfg))
    assert again.answer_stats.made == 0 and again.result.score == r.score


def test_a_provider_that_cannot_send_images_is_refused_before_any_call(tmp_path: Path) -> None:
    cfg = RunConfig(
        benchmark="vqa-rad", model="llamacpp/m", data=vqa_rad(), limit=3, options=RunOptions()
    )
    with Store(tmp_path / "s.db") as st, pytest.raises(ConfigError, match="cannot send images"):
        asyncio.run(run(st, cfg))


def test_image_preparation_is_part_of_the_run_and_changes_what_is_sent(tmp_path: Path) -> None:
    seen: dict[str, set[str]] = {"keep": set(), "png": set()}

    def spy(kind):
        def script(req: Request) -> str:
            seen[kind].update(f"{i.media_type}:{i.sha256}" for m in req.messages for i in m.images)
            return "yes"

        return script

    with Store(tmp_path / "s.db") as st:
        kept = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="vqa-rad",
                    model="scripted/v",
                    data=vqa_rad(),
                    limit=5,
                    provider_options={"script": spy("keep")},
                ),
            )
        )
        png = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="vqa-rad",
                    model="scripted/v",
                    data=vqa_rad(),
                    limit=5,
                    bench_params={"image_format": "png", "image_max_side": 128},
                    provider_options={"script": spy("png")},
                ),
            )
        )
    assert kept.run.id != png.run.id and kept.result.fingerprint != png.result.fingerprint
    assert all(x.startswith("image/jpeg:") for x in seen["keep"]) and all(
        x.startswith("image/png:") for x in seen["png"]
    )
    assert png.answer_stats.made == 5  # new images, new calls


def test_blind_and_blank_probes_measure_whether_the_answer_needs_the_image(tmp_path: Path) -> None:
    samples = VQARAD().load(vqa_rad())[:60]
    answers = {}
    for s in samples:
        answers.setdefault(s.metadata["image_sha256"], s.target)
    script = script_by_image(answers)
    right = [normalize(answers[s.metadata["image_sha256"]]) == normalize(s.target) for s in samples]
    cfg = RunConfig(
        benchmark="vqa-rad",
        model="scripted/vision",
        data=vqa_rad(),
        limit=60,
        options=RunOptions(),
        provider_options={"script": script},
    )
    with Store(tmp_path / "s.db") as st:
        ps = asyncio.run(run_probes(st, cfg, ["blind", "blank"]))
    summary = summarize_set(ps)
    drops = {d.probe: d for d in summary.drops}
    base = sum(right) / len(right)
    assert summary.baseline_accuracy == pytest.approx(base)
    for probe in (
        "blind",
        "blank",
    ):  # without the real image the model answers "unsure": every right answer is lost
        assert drops[probe].drop == pytest.approx(base)
        assert drops[probe].ci95[0] > 0
    print(
        f"\nblind probe on VQA-RAD (60 questions, scripted): accuracy {base:.3f}, blind drop {drops['blind'].drop:.3f} "
        f"CI {drops['blind'].ci95}, blank drop {drops['blank'].drop:.3f}"
    )


def test_exam_probes_are_refused_on_image_benchmarks_and_image_probes_on_exams(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db") as st:
        with pytest.raises(ConfigError, match="blind, blank"):
            asyncio.run(
                run_probes(
                    st,
                    RunConfig(benchmark="vqa-rad", model="scripted/a", data=vqa_rad(), limit=2),
                    ["permute:1"],
                )
            )
        with pytest.raises(ConfigError, match="blind, blank"):
            asyncio.run(run_probes(st, RunConfig(benchmark="demo", model="scripted/a"), ["blind"]))


def test_a_missing_image_is_a_one_line_error_naming_file_and_record(tmp_path: Path) -> None:
    (tmp_path / "VQA_RAD Image Folder").mkdir()
    rec = {
        "qid": 7,
        "phrase_type": "test_freeform",
        "image_name": "nope.jpg",
        "question": "q?",
        "answer": "yes",
        "answer_type": "CLOSED",
    }
    (tmp_path / "VQA_RAD Dataset Public.json").write_text(json.dumps([rec]), encoding="utf-8")
    with pytest.raises(Exception) as e:
        VQARAD().load(tmp_path)
    assert "nope.jpg" in str(e.value) and "qid 7" in str(e.value) and "\n" not in str(e.value)


# ---- the real command against a loopback vision server that checks every image ----------------


def independent_pairs(path: Path, rows: list[dict], image_of) -> dict[tuple[str, str], list[dict]]:
    """(question as asked, sha256 of its image file) -> the records, computed from the files alone."""
    pairs: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        sha = hashlib.sha256(image_of(r).read_bytes()).hexdigest()
        pairs.setdefault((r["question"].strip(), sha), []).append(r)
    return pairs


def vision_rule(pairs):
    """Right (the reference answer) for images whose hash starts with 0-7, "unsure" otherwise; the
    question is found in the text the server received."""

    def rule(seen) -> str:
        sha = seen.images[0].sha256 if seen.images else ""
        question = seen.texts[-1].split("\n")[0].strip() if seen.texts else ""
        recs = pairs.get((question, sha))
        return str(recs[0]["answer"]).strip() if recs and sha[0] in "01234567" else "unsure"

    return rule


def expect_own_image(pairs):
    def expect(seen) -> str | None:
        question = seen.texts[-1].split("\n")[0].strip() if seen.texts else ""
        if len(seen.images) != 1:
            return f"{len(seen.images)} images with {question!r}"
        if (question, seen.images[0].sha256) not in pairs:
            return f"{question!r} came with image {seen.images[0].sha256[:12]}, not its own"
        return None

    return expect


def cli(args: list[str], tmp: Path) -> dict:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, offline_env

    env = (
        dict(os.environ)
        | offline_env()
        | {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "ANTHROPIC_API_KEY": "test-key"}
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "grandrounds",
            *args,
            "--store",
            str(tmp / "s.db"),
            "--out",
            str(tmp / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp / "out" / "results.json").read_text(encoding="utf-8"))["results"][0]


def check_figures(result: dict, rows: list[dict], pairs, closed_label) -> None:
    right = {
        id(r)
        for (q, sha), recs in pairs.items()
        if sha[0] in "01234567"
        for r in recs
        if normalize(recs[0]["answer"]) == normalize(r["answer"])
    }

    def acc(items):
        return sum(id(r) in right for r in items) / len(items)

    closed = [r for r in rows if closed_label(r)]
    open_ = [r for r in rows if not closed_label(r)]
    yn = [r for r in rows if normalize(r["answer"]) in ("yes", "no")]
    not_yn = [r for r in rows if normalize(r["answer"]) not in ("yes", "no")]
    ex = result["extra"]
    assert result["n"] == len(rows) and result["score"] == pytest.approx(acc(rows))
    assert ex["closed_accuracy"] == pytest.approx(acc(closed)) and ex[
        "open_accuracy"
    ] == pytest.approx(acc(open_))
    assert ex["closed_accuracy_yes_no_rule"] == pytest.approx(acc(yn)) and ex[
        "open_accuracy_yes_no_rule"
    ] == pytest.approx(acc(not_yn))
    print(
        f"\n{result['benchmark']}: n {result['n']}, accuracy {result['score']:.4f} (independent {acc(rows):.4f}); "
        f"closed {ex['closed_accuracy']:.4f} / open {ex['open_accuracy']:.4f} by label ({len(closed)}/{len(open_)}); "
        f"closed {ex['closed_accuracy_yes_no_rule']:.4f} / open {ex['open_accuracy_yes_no_rule']:.4f} by the yes/no rule ({len(yn)}/{len(not_yn)})"
    )


def test_vqa_rad_through_the_command_sends_every_image_right_and_scores_as_counted(
    tmp_path: Path,
) -> None:
    from grandrounds.testing.vision import VisionServer

    folder = vqa_rad()
    rows = [
        r
        for r in json.loads((folder / "VQA_RAD Dataset Public.json").read_text(encoding="utf-8"))
        if r["phrase_type"] in ("test_freeform", "test_para")
    ]
    pairs = independent_pairs(
        folder, rows, lambda r: folder / "VQA_RAD Image Folder" / r["image_name"]
    )
    with VisionServer(
        vision_rule(pairs), expected=expect_own_image(pairs), image_order="before"
    ) as srv:
        result = cli(
            [
                "run",
                "vqa-rad",
                "--model",
                "openai/vlm",
                "--base-url",
                srv.base_url,
                "--data",
                str(folder),
            ],
            tmp_path,
        )
        assert srv.stats.problems == [] and srv.stats.mismatches == 0
        assert (
            srv.stats.requests == 451
            and srv.stats.images == 451
            and len(srv.stats.distinct_images) == 203
        )
        check_figures(result, rows, pairs, lambda r: r["answer_type"].strip() == "CLOSED")
        made = srv.stats.requests
        again = cli(
            [
                "run",
                "vqa-rad",
                "--model",
                "openai/vlm",
                "--base-url",
                srv.base_url,
                "--data",
                str(folder),
            ],
            tmp_path,
        )
        assert (
            srv.stats.requests == made and again["score"] == result["score"]
        )  # the warm re-run makes 0 calls


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_slake_english_through_the_command_in_each_wire_format(tmp_path: Path, wire: str) -> None:
    from grandrounds.testing.vision import VisionServer

    folder = slake()
    rows = [
        r
        for r in json.loads((folder / "test.json").read_text(encoding="utf-8"))
        if r["q_lang"] == "en"
    ]
    pairs = independent_pairs(folder, rows, lambda r: folder / "imgs" / r["img_name"])
    with VisionServer(
        vision_rule(pairs), expected=expect_own_image(pairs), image_order="before"
    ) as srv:
        model = (
            ["--model", "openai/vlm", "--base-url", srv.base_url]
            if wire == "openai"
            else ["--model", "anthropic/claude", "--base-url", srv.anthropic_url]
        )
        result = cli(["run", "slake", *model, "--data", str(folder)], tmp_path)
        assert (
            srv.stats.problems == []
            and srv.stats.mismatches == 0
            and srv.stats.wires == {wire: 1061}
        )
        assert srv.stats.images == 1061 and len(srv.stats.distinct_images) == 96
        check_figures(result, rows, pairs, lambda r: r["answer_type"] == "CLOSED")


def test_aggregate_counts_each_answer_once_over_every_question_of_its_split() -> None:
    """The counts MedEvalKit's VQA aggregation gets wrong, on a set where each would show: open
    accuracy divided twice (0.75 -> 0.1875), hits counted in two places, wrong closed answers left
    out of the denominator."""
    from grandrounds.core.records import Grade, Sample

    def sample(i: int, closed: bool, answer: str) -> Sample:
        return Sample(
            id=str(i),
            benchmark="vqa-rad",
            messages=(),
            target=answer,
            metadata={
                "closed": closed,
                "closed_yes_no": answer in ("yes", "no"),
                "image_organ": "CHEST",
                "question_type": "PRES",
                "phrase_type": "test_freeform",
            },
        )

    samples = [
        sample(0, True, "yes"),
        sample(1, True, "no"),
        sample(2, True, "left"),
        sample(3, True, "yes"),
        sample(4, False, "liver"),
        sample(5, False, "ct"),
        sample(6, False, "mri"),
        sample(7, False, "brain"),
    ]
    right = {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 0.0}
    grades = [
        Grade(
            sample_id=str(i),
            value=v,
            details={"token_recall": v, "unreadable": i == 3, "other_value": v},
        )
        for i, v in right.items()
    ]
    agg = VQARAD().aggregate(samples, grades, RunOptions())
    assert agg.score == pytest.approx(5 / 8)  # each hit once, every question in the denominator
    assert agg.extra["closed_accuracy"] == pytest.approx(
        2 / 4
    )  # the two wrong closed answers stay in
    assert agg.extra["open_accuracy"] == pytest.approx(3 / 4)  # divided once
    assert (
        agg.extra["closed_accuracy_yes_no_rule"] == pytest.approx(1 / 3)
        and agg.extra["n_closed_yes_no_rule"] == 3
    )
    assert agg.extra["open_accuracy_yes_no_rule"] == pytest.approx(4 / 5)
    assert (
        agg.extra["open_token_recall"] == pytest.approx(3 / 4) and agg.extra["n_unextracted"] == 1
    )


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_images_go_through_the_batch_apis_intact(tmp_path: Path, monkeypatch, wire: str) -> None:
    """VQA-RAD's first 24 questions through each vendor's batch API: every batch line carries its
    image, whose decoded bytes hash to the sample's image, and the scores are the live run's."""
    from grandrounds.testing.batch import BatchServer
    from grandrounds.testing.vision import read_request

    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "0.05")
    monkeypatch.setenv("GRANDROUNDS_BATCH_WINDOW", "0.1")
    samples = VQARAD().load(vqa_rad())[:24]
    want = {s.metadata["question"].strip(): s.metadata["image_sha256"] for s in samples}
    problems: list[str] = []

    def rule(body) -> str:
        r = read_request(body, wire)
        problems.extend(r.problems)
        question = r.texts[-1].split("\n")[0].strip()
        shas = [i.sha256 for i in r.images]
        if shas != [want.get(question)]:
            problems.append(f"{question!r}: {shas}")
        return "yes" if shas and shas[0][0] in "01234567" else "no"

    with BatchServer(rule) as srv:
        url = srv.openai_url if wire == "openai" else srv.anthropic_url
        result = cli(
            [
                "run",
                "vqa-rad",
                "--model",
                f"{wire}/vlm",
                "--base-url",
                url,
                "--data",
                str(vqa_rad()),
                "--limit",
                "24",
                "--batch",
                "answers",
            ],
            tmp_path,
        )
        assert srv.stats.live == 0 and sum(srv.batch_sizes()) == 24
    assert problems == []
    expect = [
        normalize(s.target) == ("yes" if s.metadata["image_sha256"][0] in "01234567" else "no")
        for s in samples
    ]
    assert result["score"] == pytest.approx(sum(expect) / 24)


def test_a_gguf_vision_model_gets_its_projector_and_the_images(tmp_path: Path, monkeypatch) -> None:
    """llamacpp/ with --model-opt mmproj=PATH: the projector goes to llama.cpp's multimodal chat
    handler and each question's image reaches the model as a data URL. llama.cpp itself is a
    stand-in here (no vision GGUF can be downloaded on this machine); without a projector the
    benchmark is refused before anything loads."""
    import base64

    import llama_cpp
    import llama_cpp.llama_chat_format as chat_format

    seen: dict = {"handlers": [], "messages": []}

    class Handler:
        def __init__(self, clip_model_path: str, verbose: bool = True) -> None:
            seen["handlers"].append(clip_model_path)

    class Model:
        def __init__(self, model_path: str, chat_handler=None, **kw) -> None:
            seen["model"], seen["handler"] = model_path, chat_handler

        def create_chat_completion(self, messages, **kw):
            seen["messages"].append(messages)
            return {
                "choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}],
                "usage": {},
            }

    monkeypatch.setattr(llama_cpp, "Llama", Model)
    monkeypatch.setattr(chat_format, "MTMDChatHandler", Handler)
    gguf, proj = tmp_path / "vlm.gguf", tmp_path / "mmproj.gguf"
    gguf.write_bytes(b"GGUF"), proj.write_bytes(b"GGUF")
    with Store(tmp_path / "s.db") as st:
        with pytest.raises(ConfigError, match="mmproj"):
            asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="vqa-rad", model=f"llamacpp/{gguf}", data=vqa_rad(), limit=3
                    ),
                )
            )
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="vqa-rad",
                    model=f"llamacpp/{gguf}",
                    data=vqa_rad(),
                    limit=3,
                    provider_options={"mmproj": str(proj)},
                ),
            )
        )
    assert (
        seen["handlers"] == [str(proj)]
        and isinstance(seen["handler"], Handler)
        and out.answer_stats.made == 3
    )
    samples = VQARAD().load(vqa_rad())[:3]
    for msgs, s in zip(seen["messages"], samples):
        image = next(p for p in msgs[-1]["content"] if p["type"] == "image_url")["image_url"]["url"]
        assert (
            hashlib.sha256(base64.b64decode(image.split(",", 1)[1])).hexdigest()
            == s.metadata["image_sha256"]
        )


def test_a_probe_runs_items_are_stored_as_they_were_asked(tmp_path: Path) -> None:
    """The blind probe's questions (no image) are another item set: stored under their own dataset
    key, so the viewer and the report show each run's items as asked; the unprobed key is unchanged."""
    plain, blind = VQARAD(), VQARAD(probe="blind")
    assert plain.dataset_hash(vqa_rad()) != blind.dataset_hash(vqa_rad())
    cfg = RunConfig(
        benchmark="vqa-rad",
        model="scripted/vision",
        data=vqa_rad(),
        limit=3,
        provider_options={"script": lambda req: "yes"},
    )
    with Store(tmp_path / "s.db") as st:
        ps = asyncio.run(run_probes(st, cfg, ["blind"]))
        ((probe, out),) = ps.probes
        stored = st.sample("vqa-rad", out.run.dataset_sha256, out.samples[0].id)
    assert (
        probe == "blind"
        and stored is not None
        and stored.messages[0].content == out.samples[0].messages[0].content
    )
    assert isinstance(stored.messages[0].content, str)  # the question as asked: no image


def test_a_bundle_made_from_a_folder_runs_offline_with_the_folder_gone(tmp_path: Path) -> None:
    """``bundle --data vqa-rad=FOLDER``, the folder moved away, then a run from the bundle alone
    (no reference folder, an empty cache): every image sent right and the score an independent
    count gives; the manifest names no path of the machine it was made on."""
    import os
    import shutil
    import subprocess
    import sys

    from grandrounds.testing.vision import VisionServer
    from tests.conftest import ROOT

    source = vqa_rad()
    rows_all = json.loads((source / "VQA_RAD Dataset Public.json").read_text(encoding="utf-8"))
    images = sorted(
        {r["image_name"] for r in rows_all if r["phrase_type"] in ("test_freeform", "test_para")}
    )[:12]
    folder = tmp_path / "maker" / "my-vqa-rad"
    (folder / "VQA_RAD Image Folder").mkdir(parents=True)
    kept = [r for r in rows_all if r["image_name"] in images]
    (folder / "VQA_RAD Dataset Public.json").write_text(json.dumps(kept), encoding="utf-8")
    for name in images:
        shutil.copyfile(
            source / "VQA_RAD Image Folder" / name, folder / "VQA_RAD Image Folder" / name
        )
    rows = [r for r in kept if r["phrase_type"] in ("test_freeform", "test_para")]
    pairs = independent_pairs(
        folder, rows, lambda r: folder / "VQA_RAD Image Folder" / r["image_name"]
    )
    assert any(sha[0] in "01234567" for _, sha in pairs) and any(
        sha[0] not in "01234567" for _, sha in pairs
    ), "a subset that scores between 0 and 1"

    base = {k: v for k, v in os.environ.items() if not k.startswith("GRANDROUNDS_")}
    base |= {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}

    def grandrounds(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "grandrounds", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )

    bundle = tmp_path / "carry"
    maker = base | {"GRANDROUNDS_CACHE": str(tmp_path / "maker-cache")}
    if "GRANDROUNDS_REFERENCE" in os.environ:
        maker["GRANDROUNDS_REFERENCE"] = os.environ["GRANDROUNDS_REFERENCE"]
    made = grandrounds(
        "bundle", "--out", str(bundle), "vqa-rad", "--data", f"vqa-rad={folder}", env=maker
    )
    assert made.returncode == 0, made.stderr[-3000:] + made.stdout[-2000:]
    text = (bundle / "manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    assert manifest["data"]["vqa-rad"]["path"] == "data/vqa-rad/local/my-vqa-rad"
    assert len([f for f in manifest["files"] if f.startswith("data/vqa-rad/local/")]) == 13
    assert str(tmp_path) not in text and "/maker/" not in text, "no local path in the manifest"

    shutil.move(str(tmp_path / "maker"), str(tmp_path / "moved-away"))
    reader = base | {
        "GRANDROUNDS_CACHE": str(tmp_path / "empty-cache"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    with VisionServer(
        vision_rule(pairs), expected=expect_own_image(pairs), image_order="before"
    ) as srv:
        args = ["run", "vqa-rad", "--model", "openai/vlm", "--base-url", srv.base_url]
        ran = grandrounds(
            *args,
            "--bundle",
            str(bundle),
            "--store",
            str(tmp_path / "s.db"),
            "--out",
            str(tmp_path / "out"),
            env=reader,
        )
        assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-2000:]
        assert srv.stats.problems == [] and srv.stats.mismatches == 0
        assert srv.stats.requests == len(rows) and len(srv.stats.distinct_images) == 12
    result = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    check_figures(result["results"][0], rows, pairs, lambda r: r["answer_type"].strip() == "CLOSED")
    assert 0 < result["results"][0]["score"] < 1
