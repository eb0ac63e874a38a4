"""Image sets read from a user's folder in their published layouts: PathVQA (short answers, with its
authors' script's figures checked against the official functions), and the multiple-choice image
exams PMC-VQA, OmniMedVQA, GMAI-MMBench, MMMU's health subjects and MedXpertQA MM. Every file and
image here is written by the test (images made with Pillow), in the layout each loader documents."""

from __future__ import annotations

import asyncio
import base64
import csv
import hashlib
import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.image_exams import PMCVQA, GMAIMMBench, OmniMedVQA
from grandrounds.benchmarks.medxpertqa_mm import MedXpertQAMM
from grandrounds.benchmarks.mmmu_health import SUBJECTS, MMMUHealth
from grandrounds.benchmarks.pathvqa import PathVQA
from grandrounds.core.errors import DataError
from grandrounds.core.records import ImagePart, Request, TextPart
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.scoring import pathvqa as ours
from grandrounds.store import Store
from tests.official import load_official

COLOURS = [
    "red",
    "green",
    "blue",
    "yellow",
    "purple",
    "orange",
    "black",
    "white",
    "cyan",
    "magenta",
]


def jpeg(colour: str, size: tuple[int, int] = (24, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "JPEG")
    return buf.getvalue()


def png(colour: str, size: tuple[int, int] = (12, 20)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def images_of(req: Request) -> list[str]:
    return [i.sha256 for m in req.messages for i in m.images]


def run_with(tmp: Path, bench: str, data: Path, script, **kw):
    cfg = RunConfig(
        benchmark=bench,
        model="scripted/vision",
        data=data,
        options=RunOptions(**kw.pop("options", {})),
        provider_options={"script": script},
        **kw,
    )
    with Store(tmp / "s.db") as st:
        return asyncio.run(run(st, cfg))


# ---- PathVQA ---------------------------------------------------------------------------------------


PATH_QA = [  # (image, question, answer)
    ("test_0001", "Is this a tumour?", "yes"),
    ("test_0001", "What is present?", "granuloma"),
    ("test_0002", "Are there nuclei?", "no"),
    ("test_0002", "What does this show?", "fatty change of liver"),
    ("test_0003", "Is fibrosis seen?", "yes"),
    ("test_0003", "Where is the lesion?", "left ventricle"),
]


def write_pvqa(root: Path) -> dict[str, bytes]:
    pics = {name: jpeg(COLOURS[i]) for i, name in enumerate(sorted({r[0] for r in PATH_QA}))}
    (root / "pvqa" / "qas" / "test").mkdir(parents=True)
    (root / "pvqa" / "images" / "test").mkdir(parents=True)
    for name, data in pics.items():
        (root / "pvqa" / "images" / "test" / f"{name}.jpg").write_bytes(data)
    rows = [{"image": i, "question": q, "answer": a} for i, q, a in PATH_QA]
    (root / "pvqa" / "qas" / "test" / "test_qa.pkl").write_bytes(pickle.dumps(rows))
    return pics


#: what the scripted model replies to each question (exact, partial, wrong, one word, empty)
PATH_REPLIES = {
    "Is this a tumour?": "Yes",
    "What is present?": "granuloma",
    "Are there nuclei?": "yes",
    "What does this show?": "fatty liver change",
    "Is fibrosis seen?": "yes",
    "Where is the lesion?": "ventricle",
}


def test_pathvqa_reads_the_authors_layout_and_scores_as_their_script_does(tmp_path: Path) -> None:
    pics = write_pvqa(tmp_path)
    samples = PathVQA().load(tmp_path / "pvqa")
    assert len(samples) == 6 and [s.metadata["closed"] for s in samples] == [
        True,
        False,
        True,
        False,
        True,
        False,
    ]
    image, text = samples[0].messages[0].content
    assert (
        isinstance(image, ImagePart)
        and image.sha256 == sha(pics["test_0001"])
        and isinstance(text, TextPart)
    )
    assert text.text.startswith("Is this a tumour?\n")

    def script(req: Request) -> str:
        assert len(images_of(req)) == 1
        return PATH_REPLIES[req.messages[-1].text.split("\n")[0]]

    out = run_with(tmp_path, "pathvqa", tmp_path, script)
    r = out.result
    assert r.n == 6 and r.score == pytest.approx(3 / 6)  # tumour yes, granuloma, fibrosis yes right
    authors = r.extra["authors_script"]
    assert authors["yes_no_accuracy"] == pytest.approx(2 / 3)
    official = official_pathvqa()
    opened = [(PATH_REPLIES[q], a) for _, q, a in PATH_QA if a not in ("yes", "no")]
    assert authors["open"]["n"] == 3
    assert authors["open"]["exact_match"] == pytest.approx(
        sum(official.calculate_exactmatch(c, a) for c, a in opened) / 3
    )
    assert authors["open"]["f1"] == pytest.approx(
        sum(official.calculate_f1score(c, a) for c, a in opened) / 3
    )
    bleu1 = [float(official.bleu(c, [a], 1, [1.0])) for c, a in opened]
    assert authors["open"]["bleu1"] == pytest.approx(sum(bleu1) / 3)
    # one-word answers have no bigrams: the script divides by zero there; counted 0 and reported
    assert authors["open"]["n_bleu2_undefined"] == 2


def official_pathvqa():
    utils = load_official(
        "pathvqa/Evaluation script/utils.py",
        ["split_sentence", "modified_precision", "brevity_penalty"],
    )
    return load_official(
        "pathvqa/Evaluation script/evaluation_script.py",
        ["bleu", "calculate_bleu", "calculate_exactmatch", "calculate_f1score"],
        extra=vars(utils),
    )


def test_pathvqa_figures_equal_the_authors_functions_on_a_reply_corpus() -> None:
    official = official_pathvqa()
    corpus = [
        ("yes", "yes"),
        ("Yes.", "yes"),
        ("no", "yes"),
        ("granuloma", "granuloma"),
        ("a granuloma", "granuloma"),
        ("fatty change of the liver", "fatty change of liver"),
        ("liver liver liver", "liver"),
        ("X-ray film", "x ray"),
        ("left ventricle of heart", "left ventricle"),
        ("ventricle left", "left ventricle"),
        ("the the the", "the"),
        ("123", "granuloma"),
        ("", "yes"),
        ("  spaced   out  words ", "spaced words"),
        ("cell's nuclei (many)", "nuclei"),
        ("metastatic adenocarcinoma in lymph node", "adenocarcinoma metastatic to lymph node"),
        ("ab ab ab ab", "ab ab"),
        ("muscle", "smooth muscle cells"),
        ("smooth muscle cells", "muscle"),
        ("Hyaline arteriolosclerosis", "hyaline arteriolosclerosis"),
    ]
    checked = {"em": 0, "f1": 0, "bleu": 0, "undefined": 0}
    for cand, ref in corpus:
        em = official.calculate_exactmatch(cand, ref)
        assert ours.exact_match(cand, ref) == pytest.approx(0.0 if isinstance(em, str) else em), (
            cand,
            ref,
        )
        f1 = official.calculate_f1score(cand, ref)
        assert ours.f1(cand, ref) == pytest.approx(0.0 if isinstance(f1, str) else f1), (cand, ref)
        checked["em"] += 1
        checked["f1"] += 1
        for k in (1, 2, 3):
            try:
                theirs = float(official.bleu(cand, [ref], k, [1 / k] * k))
            except ZeroDivisionError:
                assert ours.bleu(cand, ref, k) is None, (cand, ref, k)
                checked["undefined"] += 1
                continue
            assert ours.bleu(cand, ref, k) == pytest.approx(theirs), (cand, ref, k)
            checked["bleu"] += 1
    print(f"\nPathVQA authors' script: {checked} comparisons equal on {len(corpus)} replies")
    assert checked["bleu"] > 20 and checked["undefined"] > 5


def test_a_pathvqa_pickle_naming_code_is_refused_never_run(tmp_path: Path) -> None:
    write_pvqa(tmp_path)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "pvqa" / "qas" / "test" / "test_qa.pkl").write_bytes(pickle.dumps([Evil()]))
    with pytest.raises(DataError) as e:
        PathVQA().load(tmp_path)
    assert (
        "test_qa.pkl" in str(e.value)
        and "builtins.print" in str(e.value)
        and "\n" not in str(e.value)
    )


def test_a_missing_pathvqa_image_names_file_and_record(tmp_path: Path) -> None:
    write_pvqa(tmp_path)
    (tmp_path / "pvqa" / "images" / "test" / "test_0002.jpg").unlink()
    with pytest.raises(DataError) as e:
        PathVQA().load(tmp_path)
    assert (
        "test_0002.jpg" in str(e.value) and "record 2" in str(e.value) and "\n" not in str(e.value)
    )


# ---- multiple-choice image exams -------------------------------------------------------------------


def letter_by_image(keys: dict[str, str]):
    """A scripted vision model answering "Answer: X" with the key of the image it was sent; "Answer: A" otherwise."""

    def script(req: Request) -> str:
        shas = images_of(req)
        return f"Answer: {keys.get(shas[0], 'A') if shas else 'A'}"

    return script


def write_pmc(root: Path, zipped: bool = False) -> dict[str, str]:
    rows, keys = [], {}
    for i in range(6):
        data = jpeg(COLOURS[i])
        name = f"PMC{i}_fig{i}.jpg"
        if zipped:
            with zipfile.ZipFile(root / "images.zip", "a") as z:
                z.writestr(f"images/{name}", data)
        else:
            (root / "images").mkdir(exist_ok=True)
            (root / "images" / name).write_bytes(data)
        key = "ABCD"[i % 4]
        keys[sha(data)] = (
            key if i < 4 else "ABCD"[(i + 1) % 4]
        )  # the model is right on the first four
        rows.append(
            [
                name,
                f"What modality is figure {i}?",
                "x",
                *(f" {k}:option {k}{i} " for k in "ABCD"),
                key,
            ]
        )
    with (root / "test_clean.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "Figure_path",
                "Question",
                "Answer",
                "Choice A",
                "Choice B",
                "Choice C",
                "Choice D",
                "Answer_label",
            ]
        )
        w.writerows(rows)
    return keys


@pytest.mark.parametrize("zipped", [False, True])
def test_pmc_vqa_reads_the_csv_and_its_figures_and_scores_accuracy(
    tmp_path: Path, zipped: bool
) -> None:
    keys = write_pmc(tmp_path, zipped)
    samples = PMCVQA().load(tmp_path)
    assert len(samples) == 6 and samples[0].choices == {
        "A": "option A0",
        "B": "option B0",
        "C": "option C0",
        "D": "option D0",
    }
    image, text = samples[0].messages[0].content
    assert (
        isinstance(image, ImagePart)
        and isinstance(text, TextPart)
        and "What modality is figure 0?" in text.text
    )
    out = run_with(tmp_path, "pmc-vqa", tmp_path, letter_by_image(keys))
    assert out.result.n == 6 and out.result.score == pytest.approx(4 / 6)


def test_image_exam_prompts_keep_the_images_when_options_are_shuffled(tmp_path: Path) -> None:
    write_pmc(tmp_path)
    seen: list[Request] = []

    def script(req: Request) -> str:
        seen.append(req)
        return "Answer: B"

    run_with(tmp_path, "pmc-vqa", tmp_path, script, options={"shuffle_options": True, "seed": 3})
    assert len(seen) == 6 and all(len(images_of(r)) == 1 for r in seen)
    assert all(isinstance(r.messages[0].content[0], ImagePart) for r in seen)


def test_blind_probe_asks_image_exams_without_their_images(tmp_path: Path) -> None:
    write_pmc(tmp_path)
    blind = PMCVQA(probe="blind").load(tmp_path)
    assert all(isinstance(s.messages[0].content, str) for s in blind)
    blank = PMCVQA(probe="blank").load(tmp_path)
    assert all(s.messages[0].images[0].media_type == "image/png" for s in blank)
    assert PMCVQA(probe="blind").dataset_hash(tmp_path) != PMCVQA().dataset_hash(tmp_path)


def write_omni(root: Path) -> dict[str, str]:
    base = root / "OmniMedVQA"
    (base / "QA_information" / "Open-access").mkdir(parents=True)
    keys = {}
    for ds, modality in (
        ("ACRIMA", "Fundus Photography"),
        ("Chest CT Scan", "CT(Computed Tomography)"),
    ):
        (base / "Images" / ds).mkdir(parents=True)
        recs = []
        for i in range(3):
            data = png(COLOURS[len(keys)])
            (base / "Images" / ds / f"im{i}.png").write_bytes(data)
            options = (
                {"option_A": "Normal", "option_B": "Glaucoma"}
                if i == 0
                else {"option_A": "a", "option_B": "b", "option_C": "c", "option_D": "d"}
            )
            gt = list(options.values())[i % len(options)]
            keys[sha(data)] = "ABCD"[i % len(options)] if ds == "ACRIMA" else "D"
            recs.append(
                {
                    "dataset": ds,
                    "question_id": f"{ds}_{i}",
                    "question_type": "Disease Diagnosis",
                    "question": f"What is {i}?",
                    "gt_answer": gt,
                    "image_path": f"Images/{ds}/im{i}.png",
                    "modality_type": modality,
                    **options,
                }
            )
        (base / "QA_information" / "Open-access" / f"{ds}.json").write_text(
            json.dumps(recs), encoding="utf-8"
        )
    return keys


def test_omnimedvqa_reads_its_folders_and_breaks_down_by_modality(tmp_path: Path) -> None:
    keys = write_omni(tmp_path)
    samples = OmniMedVQA().load(tmp_path)
    assert (
        len(samples) == 6
        and samples[0].choices == {"A": "Normal", "B": "Glaucoma"}
        and samples[0].target == "A"
    )
    out = run_with(tmp_path, "omnimedvqa", tmp_path / "OmniMedVQA", letter_by_image(keys))
    cells = out.result.breakdown["modality"]
    # the model answers D on every CT image: no CT key is D (the first item has only A and B)
    assert (
        cells["Fundus Photography"].score == 1.0 and cells["CT(Computed Tomography)"].score == 0.0
    )
    assert (
        out.result.score == pytest.approx(3 / 6) and out.result.extra["n_unextracted"] == 1
    )  # D of A/B is no answer


def test_omnimedvqa_answer_not_among_options_names_file_and_record(tmp_path: Path) -> None:
    write_omni(tmp_path)
    path = tmp_path / "OmniMedVQA" / "QA_information" / "Open-access" / "ACRIMA.json"
    recs = json.loads(path.read_text(encoding="utf-8"))
    recs[1]["gt_answer"] = "nothing like it"
    path.write_text(json.dumps(recs), encoding="utf-8")
    with pytest.raises(DataError) as e:
        OmniMedVQA().load(tmp_path)
    assert "ACRIMA.json" in str(e.value) and "ACRIMA_1" in str(e.value) and "\n" not in str(e.value)


def write_gmai(root: Path, answers: bool = True) -> dict[str, str]:
    header = [
        "index",
        "question",
        "A",
        "B",
        "C",
        "D",
        "E",
        *(["answer"] if answers else []),
        "image",
        "clinical vqa task",
        "department",
        "perceptual granularity",
    ]
    rows, keys = [], {}
    for i in range(5):
        data = jpeg(COLOURS[i % 3])
        key = "ABCDE"[i]
        cell = (
            base64.b64encode(data).decode() if i < 3 else str(i - 3)
        )  # rows 3 and 4 share rows 0 and 1's images
        keys.setdefault(sha(data), key)
        rows.append(
            [
                str(i),
                f"Which finding {i}?\nChoose one.",
                "a",
                "b",
                "c",
                "d",
                "" if i == 0 else "e",
                *([key if i else "A"] if answers else []),
                cell,
                "Disease Diagnosis" if i % 2 else "Organ Recognition",
                "Radiology",
                "Image Level",
            ]
        )
    with (root / "GMAI-MMBench_VAL.tsv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(header)
        w.writerows(rows)
    return keys


def test_gmai_mmbench_reads_the_validation_tsv_with_shared_images(tmp_path: Path) -> None:
    keys = write_gmai(tmp_path)
    samples = GMAIMMBench().load(tmp_path)
    assert (
        len(samples) == 5
        and list(samples[0].choices) == ["A", "B", "C", "D"]
        and list(samples[1].choices) == list("ABCDE")
    )
    assert samples[3].metadata["image_sha256"] == samples[0].metadata["image_sha256"]
    out = run_with(tmp_path, "gmai-mmbench", tmp_path, letter_by_image(keys))
    # images of rows 0,1,2 answer A, B, C; rows 3 and 4 share 0 and 1's images and are keyed D, E: wrong
    assert out.result.score == pytest.approx(3 / 5)
    assert set(out.result.breakdown["clinical_vqa_task"]) == {
        "Organ Recognition",
        "Disease Diagnosis",
    }


def test_gmai_mmbench_test_split_is_refused_its_answers_are_withheld(tmp_path: Path) -> None:
    write_gmai(tmp_path, answers=False)
    with pytest.raises(DataError, match="withheld"):
        GMAIMMBench().load(tmp_path)


def write_mmmu(root: Path) -> dict[str, bytes]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pics = {}
    for s, subject in enumerate(SUBJECTS):
        (root / subject).mkdir()
        rows = []
        for i in range(2):
            one, two = png(COLOURS[2 * s]), png(COLOURS[2 * s + 1], (30, 10))
            pics[f"{subject}_{i}_1"], pics[f"{subject}_{i}_2"] = one, two
            rows.append(
                {
                    "id": f"validation_{subject}_{i}",
                    "question": "Compare <image 2> with <image 1>. Which is larger?",
                    "options": "['<image 1>', 'the second', 'neither']",
                    "answer": "A",
                    "image_1": {"bytes": one, "path": "1.png"},
                    "image_2": {"bytes": two, "path": "2.png"},
                    "img_type": "['Photos']",
                    "topic_difficulty": "Easy",
                    "question_type": "multiple-choice",
                    "subfield": "Anatomy",
                }
            )
        rows.append(
            {
                **rows[0],
                "id": f"validation_{subject}_open",
                "question_type": "open",
                "options": "[]",
                "answer": "42",
            }
        )
        pq.write_table(
            pa.Table.from_pylist(rows), root / subject / "validation-00000-of-00001.parquet"
        )
    return pics


def test_mmmu_health_interleaves_images_at_their_markers(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    pics = write_mmmu(tmp_path)
    bench = MMMUHealth()
    samples = bench.load(tmp_path)
    assert len(samples) == 10 and bench.n_open_left_out == 5
    parts = samples[0].messages[0].content
    kinds = [p.sha256 if isinstance(p, ImagePart) else "text" for p in parts]
    one, two = sha(pics[f"{SUBJECTS[0]}_0_1"]), sha(pics[f"{SUBJECTS[0]}_0_2"])
    assert (
        kinds[:5] == ["text", two, "text", one, "text"] and one in kinds[5:]
    )  # option A names image 1 again
    assert all("<image" not in p.text for p in parts if isinstance(p, TextPart))

    sent: list[Request] = []

    def script(req: Request) -> str:
        sent.append(req)
        return "Answer: A"

    out = run_with(
        tmp_path, "mmmu-health", tmp_path, script, options={"shuffle_options": True, "seed": 1}
    )
    assert out.result.n == 10 and set(out.result.breakdown["subject"]) == set(SUBJECTS)
    pairs = {sha(pics[f"{s}_{i}_2"]): sha(pics[f"{s}_{i}_1"]) for s in SUBJECTS for i in range(2)}
    for req in sent:  # shuffled options still show image 2 then image 1 in the question
        shas = images_of(req)
        assert shas[0] in pairs and shas[1] == pairs[shas[0]] and len(shas) == 3


def write_medxpert_mm(root: Path, hf: bool = False) -> dict[str, str]:
    (root / "images").mkdir()
    keys, lines = {}, []
    for i in range(3):
        names = [f"MM-{i}-a.jpeg", f"MM-{i}-b.jpeg"][: 1 + i % 2]
        for n, name in enumerate(names):
            (root / "images" / name).write_bytes(jpeg(COLOURS[2 * i + n]))
        opts = {k: f"choice {k}{i}" for k in "ABCDE"}
        label = "ABCDE"[i]
        keys[sha(jpeg(COLOURS[2 * i]))] = label
        question = f"A patient {i}. What next?\nAnswer Choices: " + " ".join(
            f"({k}) {v}" for k, v in opts.items()
        )
        rec = {
            "id": f"MM-{i}",
            "question": question,
            "images": names,
            "medical_task": "Diagnosis",
            "body_system": "Skeletal",
            "question_type": "Reasoning" if i else "Understanding",
        }
        rec |= (
            {"options": opts, "label": label}
            if hf
            else {
                "options": [{"letter": k, "content": v} for k, v in opts.items()],
                "label": [label],
            }
        )
        lines.append(json.dumps(rec))
    name = "test.jsonl" if hf else "medxpertqa_mm_input.jsonl"
    (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return keys


@pytest.mark.parametrize("hf", [False, True])
def test_medxpertqa_mm_sends_the_authors_two_turns_with_text_then_images(
    tmp_path: Path, hf: bool
) -> None:
    keys = write_medxpert_mm(tmp_path, hf)
    samples = MedXpertQAMM().load(tmp_path)
    assert len(samples) == 6 and [len(s.messages[0].images) for s in samples] == [1, 1, 2, 2, 1, 1]
    sent: list[Request] = []

    def script(req: Request) -> str:
        sent.append(req)
        if (
            len(req.messages) == 2 or req.messages[-1].images
        ):  # the reasoning turn (system + user with images)
            return "Let me think about the image."
        return f"Therefore the answer is {keys[images_of(req)[0]]}."

    out = run_with(tmp_path, "medxpertqa-mm", tmp_path, script)
    assert out.result.n == 3 and out.result.score == 1.0
    first = [r for r in sent if r.messages[-1].images]
    assert len(first) == 3 and all(isinstance(r.messages[-1].content[0], TextPart) for r in first)
    assert all(
        "Let's think step by step" in r.messages[-1].content[0].text
        or r.messages[-1].content[0].text.startswith("Q:")
        for r in first
    )
    answer_turns = [r for r in sent if not r.messages[-1].images]
    assert len(answer_turns) == 3 and all(
        images_of(r) for r in answer_turns
    )  # the history re-sends the images
