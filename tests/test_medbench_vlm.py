"""MedBench's VLM rows: every image of ``img_path`` is sent (a string, a list, nested lists; a PDF's
pages rendered to PNG up to the declared limit), counted at a loopback vision server that checks
each one; a provider that cannot send images is refused when a row has one."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from grandrounds.benchmarks.medbench import MedBench
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.store import Store
from grandrounds.testing.vision import VisionServer
from tests.conftest import ROOT, offline_env


def png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, "PNG")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def vlm_dir(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A VLM task file: one image as a string, three in a list, a nested list with a 3-page PDF, and a text-only row."""
    d = tmp_path / "vlm"
    png(d / "imgs" / "a.png", (255, 0, 0))
    for i, c in enumerate([(0, 255, 0), (0, 0, 255), (9, 9, 9)]):
        png(d / "imgs" / f"b{i}.png", c)
    pages = [Image.new("RGB", (60, 80), c) for c in [(200, 200, 0), (0, 200, 200), (200, 0, 200)]]
    pages[0].save(d / "imgs" / "report.pdf", "PDF", save_all=True, append_images=pages[1:])
    rows = [
        {
            "question": "一张图：诊断？",
            "answer": "",
            "other": {"id": 1, "source": "MedVLM_V4"},
            "img_path": "imgs/a.png",
        },
        {
            "question": "三张图：比较？",
            "answer": "",
            "other": {"id": 2, "source": "MedVLM_V4"},
            "img_path": ["imgs/b0.png", "imgs/b1.png", "imgs/b2.png"],
        },
        {
            "question": "报告和图：结论？",
            "answer": "",
            "other": {"id": 3, "source": "MedVLM_V4"},
            "img_path": [["imgs/a.png", "imgs/report.pdf"]],
        },
        {"question": "没有图：问题？", "answer": "", "other": {"id": 4, "source": "MedVLM_V4"}},
    ]
    (d / "MedVLM_V4.jsonl").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )
    return d, {
        "一张图：诊断？": 1,
        "三张图：比较？": 3,
        "报告和图：结论？": 1 + 2,
        "没有图：问题？": 0,
    }


def test_every_image_of_img_path_is_loaded_in_order_pdf_pages_up_to_the_limit(vlm_dir) -> None:
    d, counts = vlm_dir
    samples = MedBench(pdf_pages=2).load(d)
    assert [s.metadata["n_images"] for s in samples] == list(
        counts.values()
    )  # the PDF's first 2 pages
    assert (
        MedBench().load(d)[2].metadata["n_images"] == 4
    )  # default 5 pages: the image and all 3 pages
    second = samples[1].messages[-1]
    assert [i.sha256 for i in second.images] == [
        hashlib.sha256((d / "imgs" / f"b{i}.png").read_bytes()).hexdigest() for i in range(3)
    ]
    assert (
        second.text.startswith("三张图") and samples[3].messages[-1].content == "没有图：问题？"
    )  # text-only rows stay strings


def test_a_missing_image_names_the_file_line_and_image(vlm_dir) -> None:
    d, _ = vlm_dir
    (d / "imgs" / "b1.png").unlink()
    with pytest.raises(DataError, match=r"MedVLM_V4.jsonl, line 2: image 'imgs/b1.png' not found"):
        MedBench().load(d)


def test_a_row_with_images_refuses_a_provider_that_cannot_send_them(vlm_dir, tmp_path) -> None:
    d, _ = vlm_dir

    class Blind:
        spec = "blind/model"

        def image_limits(self):
            return None

    from grandrounds.run.samples import store_images

    with (
        Store(tmp_path / "s.db") as st,
        pytest.raises(ConfigError, match="cannot send images, and sample MedVLM_V4/1/0"),
    ):
        store_images(st, MedBench().load(d), Blind())


def test_the_command_sends_every_image_and_the_server_counts_them(vlm_dir, tmp_path) -> None:
    d, counts = vlm_dir
    wanted = {
        s.messages[-1].text: [i.sha256 for i in s.messages[-1].images]
        for s in MedBench(pdf_pages=2).load(d)
    }

    def expect(seen) -> str | None:
        q = seen.texts[-1]
        got = [i.sha256 for i in seen.images]
        return (
            None
            if got == wanted.get(q)
            else f"{q!r}: {len(got)} images, expected {len(wanted.get(q, []))}"
        )

    with VisionServer(lambda seen: "答", expected=expect, image_order="after") as srv:
        env = dict(os.environ) | offline_env() | {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "grandrounds",
                "run",
                "medbench",
                "--model",
                "openai/vlm",
                "--base-url",
                srv.base_url,
                "--data",
                str(d),
                "--param",
                "pdf_pages=2",
                "--store",
                str(tmp_path / "s.db"),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        assert srv.stats.problems == [] and srv.stats.mismatches == 0
        assert srv.stats.requests == 4 and srv.stats.images == sum(counts.values()) == 7
        assert sorted(len(x) for x in srv.stats.request_images) == [0, 1, 3, 3]
