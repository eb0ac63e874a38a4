"""Files that name other files, and small inputs that ask for a lot: a path in a data file that
leaves its folder (``..``, absolute, a link), a PDF page of 10,000 pt, a PDF that takes minutes to
draw, an archive member that inflates to gigabytes, one image named 150 times in a request, images
in modes PNG and JPEG cannot hold, a page tree and a manifest nested deep, a reply with a lone
surrogate, a bundle folder with planted links, a mirror that streams without end. Each is refused
(or handled) with one line naming the file and the record; peak memory and wall of the heavy ones
are printed by ``bench/hostile_inputs.py``."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import pickle
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from grandrounds.benchmarks import images as images_mod
from grandrounds.benchmarks.image_exams import PMCVQA, OmniMedVQA
from grandrounds.benchmarks.images import ImagePrep, prepare, render_pdf
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.benchmarks.medxpertqa_mm import MedXpertQAMM
from grandrounds.benchmarks.pathvqa import PathVQA
from grandrounds.benchmarks.vqa import SLAKE, VQARAD
from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.providers.images import ImageLimits, anthropic_limits, openai_limits
from grandrounds.sources import downloads, mirrors
from grandrounds.sources.downloads import DownloadError, RemoteFile
from grandrounds.sources.pinned_sizes import PINNED_BYTES
from tests import hostile_files as hostile
from tests.conftest import shared_file

# ---- 1. a path a data file names stays inside its folder -------------------------------------------


def _png(path: Path, colour: tuple[int, int, int] = (200, 10, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (24, 16), colour).save(path, "PNG")


def _slake(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    (d / "imgs").mkdir(parents=True, exist_ok=True)
    rec = {"qid": 11, "img_name": name, "question": "q?", "answer": "yes"}
    rec |= {"answer_type": "CLOSED", "q_lang": "en"}
    (d / "test.json").write_text(json.dumps([rec]), encoding="utf-8")
    b = SLAKE()
    return (lambda: b.load(d)), d / "imgs", d / "test.json"


def _vqa_rad(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    (d / "VQA_RAD Image Folder").mkdir(parents=True, exist_ok=True)
    rec = {"qid": 12, "phrase_type": "test_freeform", "image_name": name, "question": "q?"}
    rec |= {"answer": "yes", "answer_type": "CLOSED"}
    (d / "VQA_RAD Dataset Public.json").write_text(json.dumps([rec]), encoding="utf-8")
    b = VQARAD()
    return (lambda: b.load(d)), d / "VQA_RAD Image Folder", d / "VQA_RAD Dataset Public.json"


def _medbench(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    d.mkdir(parents=True, exist_ok=True)
    row = {"question": "诊断？", "answer": "", "other": {"id": 13, "source": "MedVLM_V4"}}
    (d / "MedVLM_V4.jsonl").write_text(
        json.dumps(row | {"img_path": [name]}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    b = MedBench()
    return (lambda: b.load(d)), d, d / "MedVLM_V4.jsonl"


def _omnimedvqa(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    base = d / "OmniMedVQA"
    qa = base / "QA_information" / "Open-access"
    qa.mkdir(parents=True, exist_ok=True)
    rec = {"question_id": "14", "question": "q?", "gt_answer": "a", "image_path": name}
    rec |= {"option_A": "a", "option_B": "b", "question_type": "t", "modality_type": "CT"}
    (qa / "Set.json").write_text(json.dumps([rec]), encoding="utf-8")
    b = OmniMedVQA()
    return (lambda: b.load(d)), base, qa / "Set.json"


def _pmc_vqa(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    (d / "images").mkdir(parents=True, exist_ok=True)
    head = "Figure_path,Question,Answer,Choice A,Choice B,Choice C,Choice D,Answer_label\n"
    (d / "test_clean.csv").write_text(
        head + f'"{name}",q?,x, A:a, B:b, C:c, D:d,A\n', encoding="utf-8"
    )
    b = PMCVQA()
    return (lambda: b.load(d)), d / "images", d / "test_clean.csv"


def _medxpertqa_mm(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    (d / "images").mkdir(parents=True, exist_ok=True)
    rec = {"id": "MM-15", "question": "q?", "options": {"A": "a", "B": "b"}, "label": "A"}
    rec |= {"images": [name], "question_type": "Reasoning"}
    f = d / "test.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    b = MedXpertQAMM()
    return (lambda: b.load(f)), d / "images", f


def _pathvqa(d: Path, name: str) -> tuple[Callable[[], object], Path, Path]:
    qas = d / "pvqa" / "qas" / "test"
    qas.mkdir(parents=True, exist_ok=True)
    (d / "pvqa" / "images" / "test").mkdir(parents=True, exist_ok=True)
    f = qas / "test_qa.pkl"
    f.write_bytes(pickle.dumps([{"image": name, "question": "q?", "answer": "yes"}]))
    b = PathVQA()
    return (lambda: b.load(f)), d / "pvqa" / "images" / "test", f


LOADERS = {
    "slake": _slake,
    "vqa-rad": _vqa_rad,
    "medbench": _medbench,
    "omnimedvqa": _omnimedvqa,
    "pmc-vqa": _pmc_vqa,
    "medxpertqa-mm": _medxpertqa_mm,
    "pathvqa": _pathvqa,
}


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "link"])
@pytest.mark.parametrize("loader", list(LOADERS))
def test_an_image_a_data_file_names_outside_its_folder_is_refused(tmp_path, loader, kind) -> None:
    """A private image beside the data folder, named by ``..``, by its absolute path, or through a
    link planted in the image folder: refused in one line naming the data file and the record,
    and never read; the same name inside the folder loads."""
    secret = tmp_path / "private" / "secret.png"
    _png(secret, (1, 2, 3))
    folder = tmp_path / "data"
    _, image_dir, _ = LOADERS[loader](folder, "x.png")  # lays out the folders
    if kind == "dotdot":
        name = os.path.relpath(secret, image_dir)
        assert name.startswith("..")
    elif kind == "absolute":
        name = str(secret)
    else:
        (image_dir / "link.png").symlink_to(secret)
        name = "link.png"
    load, image_dir, data_file = LOADERS[loader](folder, name)
    with pytest.raises(DataError) as e:
        load()
    msg = str(e.value)
    assert "\n" not in msg and "outside the data folder" in msg, msg
    assert data_file.name in msg and name in msg
    assert "record" in msg or "line" in msg
    # the control: an image inside the folder, by the same route, loads
    _png(image_dir / "inside.png")
    load_ok, _, _ = LOADERS[loader](folder, "inside.png")
    assert load_ok()


# ---- 2. size and time before work ------------------------------------------------------------------


@pytest.mark.parametrize("points", [10_000, 200_000])
def test_a_pdf_page_too_large_is_refused_before_it_is_rendered(tmp_path, points) -> None:
    d = tmp_path / "vlm"
    d.mkdir()
    (d / "big.pdf").write_bytes(hostile.big_page_pdf(points))
    assert (d / "big.pdf").stat().st_size < 400
    row = {"question": "报告？", "answer": "", "other": {"id": 7, "source": "MedVLM_V4"}}
    (d / "MedVLM_V4.jsonl").write_text(
        json.dumps(row | {"img_path": "big.pdf"}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    start = time.monotonic()
    with pytest.raises(DataError) as e:
        MedBench().load(d)
    msg = str(e.value)
    assert "\n" not in msg and "big.pdf" in msg and "line 1" in msg and "page 1" in msg
    assert "refused before rendering" in msg and f"{points:g} x {points:g} pt" in msg
    assert time.monotonic() - start < 10


def test_a_pdf_page_that_draws_too_long_is_stopped_at_its_time_limit() -> None:
    raw = hostile.slow_pdf()  # 5 pages sharing one content stream: about 18 s a page unbounded
    assert len(raw) < 40_000
    start = time.monotonic()
    with pytest.raises(DataError) as e:
        render_pdf(raw, 5, 2.0, Path("slow.pdf"), "line 3", seconds=1.0)
    took = time.monotonic() - start
    msg = str(e.value)
    assert "\n" not in msg and "slow.pdf, line 3" in msg and "took over 1 s" in msg
    assert took < 8, took


def test_ordinary_pdf_pages_render_as_before() -> None:
    pages = [Image.new("RGB", (60, 80), c) for c in [(200, 200, 0), (0, 200, 200)]]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:])
    out = render_pdf(buf.getvalue(), 5, 2.0, Path("r.pdf"), "line 1")
    assert [Image.open(io.BytesIO(p)).size for p in out] == [(120, 160), (120, 160)]
    assert Image.open(io.BytesIO(out[1])).convert("RGB").getpixel((60, 80)) == (0, 200, 200)


def test_an_archive_member_that_inflates_past_the_bound_is_stopped(tmp_path, monkeypatch) -> None:
    """PMC-VQA's images.zip: a member whose declared size passes the bound is refused without
    inflating; one that lies about its size stops at what it declared (zipfile's count)."""
    monkeypatch.setattr(images_mod, "MAX_IMAGE_BYTES", 4 * 2**20)
    d = tmp_path / "pmc"
    d.mkdir()
    head = "Figure_path,Question,Answer,Choice A,Choice B,Choice C,Choice D,Answer_label\n"
    (d / "test_clean.csv").write_text(head + "f.jpg,q?,x, A:a, B:b, C:c, D:d,A\n", "utf-8")
    hostile.inflating_zip(d / "images.zip", "images/f.jpg", 64 * 2**20)
    assert (d / "images.zip").stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as e:
            PMCVQA().load(d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert "\n" not in msg and "images.zip" in msg and "line 2" in msg and "images/f.jpg" in msg
    assert "declares 67,108,864 bytes" in msg
    assert peak < 8 * 2**20, f"{peak:,} bytes traced: the member was inflated"
    # a member whose header says 2 MB but inflates to 16: zipfile stops at 2 MB (a CRC error)
    lying = d / "images.zip"
    hostile.inflating_zip(lying, "images/f.jpg", 16 * 2**20)
    data = bytearray(lying.read_bytes())
    for field in (b"\x00\x00\x00\x01",):  # 16 MiB little-endian, in the central directory
        i = data.rfind(field)
        data[i : i + 4] = (2 * 2**20).to_bytes(4, "little")
    lying.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        PMCVQA().load(d)
    assert "\n" not in str(e.value) and "images/f.jpg" in str(e.value)


def _noise_png(path: Path, side: int) -> None:
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(path, "PNG")


def test_one_image_named_150_times_is_refused_before_any_call(tmp_path) -> None:
    """A 4 KB MedBench row naming one ~1 MB image 150 times: every copy travels in the request, so
    OpenAI's published 50 MB a request refuses it, the message counting the repeats; the image is
    read and prepared once. ``max_request_mb`` raises the bound; other providers have a default."""
    d = tmp_path / "vlm"
    d.mkdir()
    _noise_png(d / "big.png", 600)
    row = {"question": "看图？", "answer": "", "other": {"id": 9, "source": "MedVLM_V4"}}
    line = json.dumps(row | {"img_path": ["big.png"] * 150}, ensure_ascii=False)
    assert len(line) < 4096
    (d / "MedVLM_V4.jsonl").write_text(line + "\n", encoding="utf-8")
    b = MedBench()
    (sample,) = b.load(d)
    assert b.images.bytes_read == (d / "big.png").stat().st_size  # read once
    with pytest.raises(ConfigError) as e:
        openai_limits(20.0).check(sample)
    msg = str(e.value)
    assert "\n" not in msg and "sample" in msg and "52,428,800 bytes" in msg
    assert "150 images" in msg and "149 of them repeats: 1 distinct" in msg
    assert "max_request_mb" in msg
    openai_limits(20.0, max_request_mb=1000.0).check(sample)  # raised: taken
    with pytest.raises(
        ConfigError, match=r"150 images in one request .* over the limit of 100 \(Anthropic's API\)"
    ):
        anthropic_limits().check(sample)
    with pytest.raises(ConfigError, match=r"over the limit of 100 \(llama.cpp\)"):
        ImageLimits(source="llama.cpp").check(sample)


def test_the_request_caps_are_model_options_with_published_defaults() -> None:
    from grandrounds.providers.anthropic import AnthropicProvider
    from grandrounds.providers.openai_compat import OpenAIProvider

    opts = {p.name: p.default for p in OpenAIProvider.model_options}
    assert opts["max_images"] == 500 and opts["max_request_mb"] == 50.0
    opts = {p.name: p.default for p in AnthropicProvider.model_options}
    assert opts["max_images"] == 100 and opts["max_request_mb"] == 32.0


# ---- 3. decode, render, encode: converted or one line ----------------------------------------------


def test_colour_modes_and_depths_are_converted_as_the_docs_say() -> None:
    where = Path("x")
    # CMYK with an EXIF rotation, default settings: rotated, then sent as RGB PNG
    data, media, w, h = prepare(hostile.cmyk_rotated_jpeg(), ImagePrep(), where, "record 1")
    assert media == "image/png" and (w, h) == (20, 40)
    assert Image.open(io.BytesIO(data)).mode == "RGB"
    # a float TIFF as PNG: 8-bit greyscale over its own range
    data, media, w, h = prepare(hostile.float_tiff(), ImagePrep(image_format="png"), where, 2)
    img = Image.open(io.BytesIO(data))
    assert media == "image/png" and img.mode == "L" and img.getextrema() == (0, 255)
    # 16-bit PNG: kept 16-bit in PNG, 8-bit greyscale over its range in JPEG
    raw16 = hostile.sixteen_bit_png()
    data, media, *_ = prepare(raw16, ImagePrep(image_format="png"), where, 3)
    assert Image.open(io.BytesIO(data)).mode in ("I;16", "I")
    data, media, *_ = prepare(raw16, ImagePrep(image_format="jpeg"), where, 3)
    img = Image.open(io.BytesIO(data))
    assert media == "image/jpeg" and img.mode == "L" and img.getextrema()[1] >= 250
    # palette with transparency as JPEG: RGB
    data, media, *_ = prepare(
        hostile.palette_png_with_transparency(), ImagePrep(image_format="jpeg"), where, 4
    )
    assert Image.open(io.BytesIO(data)).mode == "RGB"
    # float TIFF in greyscale mode: converted, not a traceback
    data, *_ = prepare(hostile.float_tiff(), ImagePrep(image_colour="L"), where, 5)
    assert Image.open(io.BytesIO(data)).mode == "L"


def test_an_undecodable_image_and_a_deep_page_tree_are_one_line_errors(tmp_path) -> None:
    jpeg = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 9, 9)).save(jpeg, "JPEG")
    with pytest.raises(DataError) as e:
        prepare(jpeg.getvalue()[:200], ImagePrep(image_format="png"), Path("a.jpg"), "line 4")
    assert "\n" not in str(e.value) and str(e.value).startswith("a.jpg, line 4:")
    with pytest.raises(DataError) as e:
        render_pdf(hostile.deep_tree_pdf(2000), 5, 2.0, Path("deep.pdf"), "line 5")
    assert "\n" not in str(e.value) and str(e.value).startswith("deep.pdf, line 5: PDF page 1")


def test_a_manifest_nested_100000_deep_is_one_line(tmp_path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "manifest.json").write_text(hostile.deep_json(100_000), encoding="utf-8")
    with pytest.raises(DataError) as e:
        mirrors.read_manifest(out / "manifest.json", "write it again")
    assert "\n" not in str(e.value) and "nested too deep" in str(e.value)
    r = CliRunner().invoke(app, ["bundle", "--out", str(out), "medbench"], env={"COLUMNS": "250"})
    assert r.exit_code != 0 and "nested too deep" in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    (tmp_path / "q.json").write_text(hostile.deep_json(100_000), encoding="utf-8")
    with pytest.raises(DataError, match="nested too deep"):
        SLAKE().rows(tmp_path / "q.json")


# ---- 4. text with no UTF-8 form -------------------------------------------------------------------


def test_a_reply_with_a_lone_surrogate_or_nul_is_stored_losslessly_and_the_run_finishes(
    tmp_path,
) -> None:
    """Three VQA-RAD questions against the scripted vision server, whose replies hold a lone
    surrogate and a NUL: the run finishes, again from the store, the store keeps each reply exactly,
    and the reports show the surrogate escaped."""
    from grandrounds.testing.vision import VisionServer
    from tests.test_vqa import cli

    folder = shared_file("vqa-rad", "VQA_RAD Dataset Public.json").parent
    replies = ["yes\ud800", "no\x00", "\udfffaxial"]
    got = iter(replies)
    with VisionServer(lambda seen: next(got)) as srv:
        args = ["run", "vqa-rad", "--model", "openai/vlm", "--base-url", srv.base_url]
        args += ["--data", str(folder), "--limit", "3"]
        first = cli(args, tmp_path)
        assert srv.stats.requests == 3 and first["n"] == 3
        again = cli(args, tmp_path)  # every answer from the store
        assert srv.stats.requests == 3 and again["score"] == first["score"]
    db = sqlite3.connect(tmp_path / "s.db")
    db.text_factory = bytes
    stored = [r[0] for r in db.execute("SELECT text FROM calls")]
    assert sorted(t.decode("utf-8", "surrogatepass") for t in stored) == sorted(replies)
    from grandrounds.store import Store

    with Store(tmp_path / "s.db") as st:
        keys = [r[0].decode() for r in db.execute("SELECT key FROM calls")]
        texts = [r.text for r in st.calls_by_key(keys).values()]
    assert sorted(texts) == sorted(replies)
    for fmt in ("html", "md", "csv", "xlsx"):
        out = tmp_path / f"r.{fmt}"
        r = CliRunner().invoke(
            app, ["report", "-f", fmt, "-o", str(out), "--store", str(tmp_path / "s.db")]
        )
        assert r.exit_code == 0, r.output
        if fmt in ("html", "md"):
            text = out.read_text(encoding="utf-8")
            assert "ud800" in text and "\ud800" not in text
            assert "\x00" not in text and "x00" in text


# ---- 5. bundles and downloads --------------------------------------------------------------------


def _bundle(out: Path, data: Path) -> tuple[int, str]:
    r = CliRunner().invoke(
        app,
        ["bundle", "--out", str(out), "medbench", "--data", f"medbench={data}"],
        env={"COLUMNS": "250"},
    )
    return r.exit_code, r.output


def test_bundle_writes_nothing_through_planted_links(tmp_path) -> None:
    data = tmp_path / "medbench"
    data.mkdir()
    (data / "MedQA.jsonl").write_text(
        json.dumps({"question": "q", "answer": "A", "other": {"id": 1, "source": "MedQA"}}) + "\n",
        encoding="utf-8",
    )
    victim = tmp_path / "victim.txt"
    victim.write_text("mine", encoding="utf-8")
    out = tmp_path / "b"
    out.mkdir()
    (out / "manifest.json").symlink_to(victim)
    code, output = _bundle(out, data)  # a manifest that is a link: refused, not read nor replaced
    assert code != 0 and "symbolic link" in output and "Traceback" not in output
    assert victim.read_text(encoding="utf-8") == "mine"
    (out / "manifest.json").unlink()
    (out / "manifest.json.part").symlink_to(victim)  # the temporary name of earlier versions
    code, output = _bundle(out, data)
    assert code == 0, output
    assert victim.read_text(encoding="utf-8") == "mine"
    assert not (out / "manifest.json").is_symlink()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert "data/medbench/local/medbench/MedQA.jsonl" in manifest["files"]
    # a folder of the bundle planted as a link elsewhere: refused, nothing written there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "b2"
    out2.mkdir()
    (out2 / "data").symlink_to(elsewhere)
    code, output = _bundle(out2, data)
    assert code != 0 and "symbolic link" in output and "Traceback" not in output
    assert list(elsewhere.iterdir()) == []


class _Endless(http.server.BaseHTTPRequestHandler):
    sent = 0

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()
        block = b"x" * (1 << 16)
        try:
            for _ in range(300 * 16):  # 300 MiB, no Content-Length
                self.wfile.write(block)
                type(self).sent += len(block)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


def test_a_download_stops_at_the_pinned_size(tmp_path, monkeypatch) -> None:
    """A server that streams 300 MiB for a file pinned at a few KB: the download stops at the
    pinned file's size, before the rest is read or written, and says so."""
    sha, size = min(PINNED_BYTES.items(), key=lambda kv: kv[1] if kv[1] > 1000 else 1 << 60)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/file.json"
        with pytest.raises(DownloadError) as e:
            downloads.fetch(RemoteFile(url, "file.json", sha), tmp_path / "d")
    finally:
        server.shutdown()
        server.server_close()
    msg = str(e.value)
    assert "\n" not in msg and f"passed {size:,} bytes" in msg and "pins" in msg
    assert list((tmp_path / "d").iterdir()) == [], "nothing kept"
    assert _Endless.sent < 32 * 2**20, f"{_Endless.sent:,} bytes sent: the download was not stopped"
    # an unpinned file: the stated default (here set through the environment)
    monkeypatch.setenv(downloads.MAX_DOWNLOAD_ENV, "0.5")
    bound, why = downloads.size_bound(RemoteFile("http://x/y", "y", None))
    assert bound == 512 * 1024 and downloads.MAX_DOWNLOAD_ENV in why
    assert hashlib.sha256(b"").hexdigest() not in PINNED_BYTES


def test_a_request_quoting_a_lone_surrogate_is_sent_escaped() -> None:
    """A judge's request quotes the candidate's reply, lone surrogate and all: the body is sent
    with the JSON escape (a server reads back the same text), never refused by the encoder."""
    import asyncio

    from grandrounds.providers.http import HttpClient
    from grandrounds.testing import LoopbackServer

    seen: list[str] = []

    def rule(body: dict) -> str:
        seen.append(body["messages"][0]["content"])
        return "same"

    async def post(url: str) -> int:
        client = HttpClient(url, {})
        try:
            body = {"model": "judge", "messages": [{"role": "user", "content": "yes\ud800 é"}]}
            return (await client.post("/chat/completions", body)).status
        finally:
            await client.aclose()

    with LoopbackServer(rule) as srv:
        assert asyncio.run(post(srv.base_url)) == 200
    assert seen == ["yes\ud800 é"]
