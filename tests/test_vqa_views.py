"""Images where people look: the viewer's ``/image/<sha256>`` route and question view, and the HTML
report's embedded images, on real VQA-RAD runs (scripted answers carrying an XSS payload).

The route serves the stored bytes with their own type and ``nosniff``, refuses any name that is not
a stored hash (400 / 404), any file that is not shown (another type's bytes, a name that is not its
hash, over the size cap, a link out of the image folder: 403), and, beyond loopback, any request
without the access token. The report embeds each distinct image once (an SVG symbol holding a
``data:`` URI, drawn by ``<use>`` in every question showing it) up to its size cap. In Chromium the
viewer's thumbnail loads beside the answer and the report's thumbnail draws the image.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import re
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html import escape
from pathlib import Path
from typing import Any

import pytest

from grandrounds.analyses import collect
from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import ImagePart, Request
from grandrounds.reports import build_report, html
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.store.images import ImageStore
from grandrounds.viewer.httpd import ViewerServer
from grandrounds.viewer.server import make_server
from tests.conftest import shared_file
from tests.synthetic import XSS
from tests.test_viewer import Client

N_JPEG = 8  # questions of the JPEG run (as the files hold them)
N_PNG = 3  # questions of the PNG run (re-encoded, 128 px)


def vqa_rad() -> Path:
    return shared_file("vqa-rad", "VQA_RAD Dataset Public.json").parent


def answer(req: Request) -> str:
    return "yes " + XSS


def _runs(db: Path, data: Path) -> None:
    with Store(db) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="vqa-rad",
                    model="scripted/a",
                    data=data,
                    limit=N_JPEG,
                    options=RunOptions(),
                    provider_options={"script": answer},
                ),
            )
        )
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="vqa-rad",
                    model="scripted/a",
                    data=data,
                    limit=N_PNG,
                    options=RunOptions(),
                    provider_options={"script": answer},
                    bench_params={"image_format": "png", "image_max_side": 128},
                ),
            )
        )


@pytest.fixture(scope="module")
def vqa_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two VQA-RAD runs: the first questions' JPEGs as sent, and a few as 128 px PNGs."""
    data = vqa_rad()
    db = tmp_path_factory.mktemp("vqa-views") / "s.db"
    with ThreadPoolExecutor(1) as pool:  # the runner's event loop cannot run inside Playwright's
        pool.submit(_runs, db, data).result()
    return db


def stored_images(db: Path) -> dict[str, ImagePart]:
    """Every image the store's samples hold, by hash."""
    with Store(db) as st:
        rows = st.db.execute(
            "SELECT benchmark, dataset_sha256 FROM samples GROUP BY 1, 2"
        ).fetchall()
        samples = [s for b, ds in rows for s in st.samples(b, ds)]
    return {p.sha256: p for s in samples for m in s.messages for p in m.images}


def start(db: Path, **kw: Any) -> tuple[ViewerServer, Client]:
    srv = make_server(db, port=0, **kw)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, Client(f"http://127.0.0.1:{srv.server_address[1]}")


def stop(srv: ViewerServer) -> None:
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def viewer(vqa_db: Path) -> Iterator[Client]:
    srv, client = start(vqa_db)
    yield client
    stop(srv)


# ---- the image route -----------------------------------------------------------------------


def test_the_image_route_serves_each_stored_image_as_its_bytes_and_type(
    vqa_db: Path, viewer: Client
) -> None:
    images = stored_images(vqa_db)
    types = {p.media_type for p in images.values()}
    assert types == {"image/jpeg", "image/png"} and len(images) >= N_PNG + 2
    store = ImageStore.beside(vqa_db)
    for sha, part in images.items():
        code, headers, body = viewer.request("GET", f"/image/{sha}")
        assert code == 200, body
        assert (
            headers["Content-Type"] == part.media_type
            and headers["X-Content-Type-Options"] == "nosniff"
        )
        assert (
            headers["Content-Length"] == str(len(body))
            and "img-src 'self'" in headers["Content-Security-Policy"]
        )
        assert hashlib.sha256(body).hexdigest() == sha and body == store.get(sha, part.media_type)
    raw = (
        vqa_rad() / "VQA_RAD Image Folder" / "synpic42202.jpg"
    ).read_bytes()  # the first question's image, sent as the file holds it
    assert viewer.request("GET", f"/image/{hashlib.sha256(raw).hexdigest()}")[2] == raw


@pytest.mark.parametrize(
    "name, code",
    [
        ("", 400),
        ("ABC", 400),
        ("x" * 64, 400),
        ("../s.db", 400),
        ("..%2Fs.db", 400),
        ("%2e%2e/%2e%2e/s.db", 400),
        ("0" * 63, 400),
        ("0" * 65, 400),
        ("0" * 64 + ".jpg", 400),
        ("0" * 64 + "/x", 400),
        ("0" * 64, 404),
        ("f" * 64, 404),
    ],
)
def test_the_image_route_answers_only_a_stored_hash(viewer: Client, name: str, code: int) -> None:
    got, headers, body = viewer.request("GET", "/image/" + name)
    assert got == code and headers["Content-Type"].startswith("text/plain")


def test_an_upper_case_or_traversal_name_of_a_real_image_is_refused(
    vqa_db: Path, viewer: Client
) -> None:
    sha = next(iter(stored_images(vqa_db)))
    assert viewer.request("GET", f"/image/{sha.upper()}")[0] == 400
    assert viewer.request("GET", f"/image/../{sha[:2]}/{sha}")[0] == 400
    assert viewer.request("GET", f"/image/{sha[:2]}/{sha}.jpg")[0] == 400
    assert viewer.request("GET", f"/image/{sha}?x=1")[0] == 200  # a query is no part of the name


def _put(root: Path, name: str, ext: str, data: bytes) -> Path:
    p = root / name[:2] / (name + ext)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def test_files_that_are_not_shown_are_refused(tmp_path: Path) -> None:
    from PIL import Image

    db = tmp_path / "crafted.db"
    Store(db).close()
    root = ImageStore.beside(db).root
    out = io.BytesIO()
    Image.new("RGB", (4, 3), "red").save(out, "PNG")
    png = out.getvalue()
    good = hashlib.sha256(png).hexdigest()
    _put(root, good, ".png", png)
    svg = b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>"
    as_jpeg = hashlib.sha256(svg).hexdigest()
    _put(root, as_jpeg, ".jpg", svg)  # script named as a JPEG
    renamed = "1" * 64
    _put(root, renamed, ".png", png)  # a PNG under a name that is not its hash
    big = b"\xff\xd8\xff" + bytes(collect.MAX_IMAGE_BYTES)
    huge = hashlib.sha256(big).hexdigest()
    _put(root, huge, ".jpg", big)
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(png[:-1] + b"\x00")
    linked = hashlib.sha256(outside.read_bytes()).hexdigest()
    (root / linked[:2]).mkdir(exist_ok=True)
    (root / linked[:2] / (linked + ".png")).symlink_to(outside)  # a link out of the image folder
    bmp = "2" * 64
    _put(root, bmp, ".bin", b"BM" + bytes(100))  # a type that is not shown
    srv, c = start(db)
    try:
        code, headers, body = c.request("GET", f"/image/{good}")
        assert (code, headers["Content-Type"], body) == (200, "image/png", png)
        for name, why in (
            (as_jpeg, "not image/jpeg"),
            (renamed, "does not match its hash"),
            (huge, "larger than"),
            (linked, "inside the store's image folder"),
        ):
            code, headers, body = c.request("GET", f"/image/{name}")
            assert (
                code == 403
                and why in body.decode()
                and headers["Content-Type"].startswith("text/plain")
            ), (name, body)
        assert c.request("GET", f"/image/{bmp}")[0] == 404
    finally:
        stop(srv)


def test_beyond_loopback_an_image_needs_the_access_token(vqa_db: Path) -> None:
    sha = next(iter(stored_images(vqa_db)))
    srv, c = start(vqa_db, host="0.0.0.0")  # a wildcard bind: the token is required
    try:
        token = srv.context.guard.token if srv.context else None
        assert token
        code, _, body = c.request("GET", f"/image/{sha}")
        assert code == 403 and hashlib.sha256(body).hexdigest() != sha
        assert c.request("GET", f"/image/{sha}?token=not-the-token")[0] == 403
        assert (
            Client(c.base, f"evil.test:{c.port}").request("GET", f"/image/{sha}?token={token}")[0]
            == 421
        )
        code, _, body = c.request("GET", f"/image/{sha}?token={token}")
        assert code == 200 and hashlib.sha256(body).hexdigest() == sha
        code, _, body = c.request(
            "GET", f"/image/{sha}"
        )  # then the cookie, as the page's <img> sends it
        assert code == 200 and hashlib.sha256(body).hexdigest() == sha
    finally:
        stop(srv)


def test_the_item_api_names_images_by_hash_never_bytes(vqa_db: Path, viewer: Client) -> None:
    import json

    code, _, body = viewer.request("GET", "/api/items?benchmark=vqa-rad&per_page=50")
    items = json.loads(body)["items"]
    assert code == 200 and items[0]["question"] == "Is there evidence of an aortic aneurysm?"
    code, _, body = viewer.request("GET", f"/api/item/{items[0]['id']}")
    (msg,) = json.loads(body)["sample"]["messages"]
    image, text = msg["content"]
    assert (
        image["type"] == "image"
        and re.fullmatch(r"[0-9a-f]{64}", image["sha256"])
        and "data" not in image
    )
    assert text["type"] == "text" and text["text"].startswith(
        "Is there evidence of an aortic aneurysm?"
    )
    assert len(body) < 20_000  # no bytes in the JSON


# ---- the HTML report -----------------------------------------------------------------------

DATA_URI = re.compile(
    r"<symbol id='im-([0-9a-f]{64})' viewBox='0 0 (\d+) (\d+)'><image href='data:(image/[a-z]+);base64,([A-Za-z0-9+/=]+)'"
)


def test_the_html_report_embeds_each_image_once_and_escapes_text(
    vqa_db: Path, tmp_path: Path
) -> None:
    with Store(vqa_db, readonly=True) as st:
        [out] = build_report(st, "html", tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    images = stored_images(vqa_db)
    embedded = {m[0]: m for m in DATA_URI.findall(page)}
    assert len(DATA_URI.findall(page)) == len(embedded) == len(images)  # each distinct image once
    for sha, (_, w, h, media, b64) in embedded.items():
        data = base64.b64decode(b64, validate=True)
        assert hashlib.sha256(data).hexdigest() == sha and media == images[sha].media_type
        from PIL import Image

        assert Image.open(io.BytesIO(data)).size == (int(w), int(h))
    assert page.count("<use href='#im-") == N_JPEG + N_PNG  # every question draws its image
    items = re.findall(r"<details class='item' id='[^']+'>(.*?)</details>", page, re.S)
    assert len(items) == N_JPEG + N_PNG
    for item in items:
        (sha,) = re.findall(r"<use href='#im-([0-9a-f]{64})'/>", item)
        assert sha in images and "[image 1]" in item and "with-images" in item
    assert XSS not in page and escape(XSS) in page  # the answers, escaped
    assert "<script>window.__pwned" not in page and page.count("<script>") == 1
    assert "Is there evidence of an aortic aneurysm?" in page


def test_past_the_size_cap_a_report_names_the_image_and_the_viewer(
    vqa_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = (vqa_rad() / "VQA_RAD Image Folder" / "synpic42202.jpg").read_bytes()
    cap = len(f"data:image/jpeg;base64,{base64.b64encode(first).decode()}")
    monkeypatch.setattr(html, "IMAGE_CAP", cap)  # room for the first question's image only
    with Store(vqa_db, readonly=True) as st:
        [out] = build_report(st, "html", tmp_path / "capped.html")
    page = out.read_text(encoding="utf-8")
    assert [m[0] for m in DATA_URI.findall(page)] == [hashlib.sha256(first).hexdigest()]
    assert page.count(
        "image not embedded (report size cap); see the viewer"
    ) == N_JPEG + N_PNG - page.count("<use href=")
    assert page.count("<use href=") >= 1


def test_a_report_embeds_no_file_that_is_not_shown(vqa_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.db"
    shutil.copy(vqa_db, db)
    shutil.copytree(ImageStore.beside(vqa_db).root, ImageStore.beside(db).root)
    sha, part = next((s, p) for s, p in stored_images(db).items() if p.media_type == "image/jpeg")
    ImageStore.beside(db).path(sha, part.media_type).write_bytes(
        b"<svg onload='window.__pwned=1'/>"
    )  # changed on disk
    with Store(db, readonly=True) as st:
        [out] = build_report(st, "html", tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    assert "<svg onload" not in page and f"id='im-{sha}'" not in page
    assert "image not shown: the file is not image/jpeg" in page


# ---- in Chromium -----------------------------------------------------------------------------


@pytest.mark.browser
def test_the_viewer_shows_the_image_beside_the_answer_in_chromium(
    vqa_db: Path, tmp_path: Path
) -> None:
    from tests.test_browser import launch_chromium

    srv, c = start(vqa_db)
    try:
        import json

        items = json.loads(c.request("GET", "/api/items?benchmark=vqa-rad")[2])["items"]
        first = items[0]
        part = json.loads(c.request("GET", f"/api/item/{first['id']}")[2])["sample"]["messages"][0][
            "content"
        ][0]
        sha = part["sha256"]
        with launch_chromium() as browser:
            pg = browser.new_page(viewport={"width": 1200, "height": 800})
            expect = pytest.importorskip("playwright.sync_api").expect
            pg.goto(f"{c.base}/#/item/{first['id']}")
            pg.wait_for_selector("#answers .answer")
            img = pg.locator("#figures img.thumb")
            expect(img).to_have_count(1)
            expect(img).to_be_visible()
            pg.wait_for_function(
                "() => { const i = document.querySelector('#figures img.thumb'); return i.complete && i.naturalWidth > 0; }"
            )
            natural = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
            from PIL import Image

            assert natural == list(
                Image.open(io.BytesIO(ImageStore.beside(vqa_db).get(sha, part["media_type"]))).size
            )
            box, ans = img.bounding_box(), pg.locator("#answers .answer").first.bounding_box()
            assert box and ans and 0 < box["width"] <= 242  # a thumbnail (240 px and its border)
            assert box["x"] + box["width"] <= ans["x"]  # beside the answer: left of it,
            assert (
                box["y"] < ans["y"] + ans["height"] and ans["y"] < box["y"] + box["height"]
            )  # at its height
            link = pg.locator("#figures a:has(img.thumb)")
            assert link.get_attribute("href") == f"/image/{sha}"
            assert (
                pg.evaluate("typeof window.__pwned") == "undefined"
                and pg.locator("img").count() == 1
            )  # the answer's <img> is text
            assert XSS in pg.locator("#answers").text_content()
            shot = tmp_path / "vqa-rad-item.png"
            pg.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000 and Image.open(shot).size[0] == 1200
            with pg.expect_popup() as popup:
                link.click()
            full = popup.value
            full.wait_for_load_state()
            assert (
                full.url.endswith(f"/image/{sha}") and full.evaluate("document.images.length") == 1
            )
    finally:
        stop(srv)


@pytest.mark.browser
def test_the_report_draws_its_embedded_image_in_chromium(vqa_db: Path, tmp_path: Path) -> None:
    from PIL import Image

    from tests.test_browser import launch_chromium

    with Store(vqa_db, readonly=True) as st:
        [out] = build_report(st, "html", tmp_path / "r.html")
    with launch_chromium() as browser:
        pg = browser.new_page(viewport={"width": 1200, "height": 800})
        pg.goto(out.as_uri())
        item = pg.locator("details.item").first
        item.locator("summary").click()
        thumb = item.locator("svg.thumb")
        box, ans = thumb.bounding_box(), item.locator(".answers").bounding_box()
        assert box and ans and 200 < box["width"] <= 242 and box["x"] + box["width"] <= ans["x"]
        lo, hi = Image.open(io.BytesIO(thumb.screenshot())).convert("L").getextrema()
        assert hi - lo > 100  # the radiograph is drawn, not an empty box
        item.locator("label").first.click()  # a click enlarges it
        assert thumb.bounding_box()["width"] > box["width"]  # type: ignore[index]
        item.screenshot(path=str(tmp_path / "report-item.png"))
        assert pg.evaluate("typeof window.__pwned") == "undefined"
