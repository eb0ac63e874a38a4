"""The report and the viewer in a real browser: Debian's chromium driven by Playwright.

Nothing downloads a browser: Playwright is pointed at /usr/bin/chromium. Without it the tests
skip with the reason (fail under CI=true). Checks: navigation from the leaderboard to a
question, filtering, submitting a review, and that an answer holding <script> and an
<img onerror> is shown as text and runs nothing (window.__pwned stays undefined, no dialog).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from grandrounds.reports import build_report
from grandrounds.store import Store
from grandrounds.viewer.server import make_server
from tests.synthetic import XSS, SynthSpec, build_store

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def launch_chromium(extra_args: Sequence[str] = ()) -> Iterator[Any]:
    """Debian's chromium under Playwright, with ``extra_args``; skips (fails under CI=true) when
    chromium or Playwright is missing."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        msg = f"chromium not found at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    if os.environ.get("CI", "").lower() == "true":
        import playwright.sync_api as sync_api  # required in CI: an ImportError fails the test
    else:
        sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, *extra_args], headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with launch_chromium() as b:
        yield b


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    pg = browser.new_page()  # type: ignore[attr-defined]
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    pg.close()


def not_pwned(pg: object) -> None:
    assert pg.evaluate("typeof window.__pwned") == "undefined"  # type: ignore[attr-defined]
    assert pg.dialogs == []  # type: ignore[attr-defined]
    assert pg.locator("img").count() == 0  # type: ignore[attr-defined]


def test_report_navigation_filter_and_escaping(page: object, tmp_path: Path) -> None:
    st = build_store(tmp_path / "r.db", SynthSpec(n_samples=30, n_models=3))
    [out] = build_report(st, "html", tmp_path / "report.html")
    st.close()
    pg = page
    pg.goto(out.as_uri())
    assert pg.locator("table.board tr").count() == 4
    pg.locator("table.board a", has_text="scripted/model-00").click()
    assert pg.evaluate("location.hash") == "#drill-0"
    item = pg.locator("details.item").first
    item.locator("summary").click()
    answers = item.locator(".ans")
    assert answers.count() == 3 and answers.first.is_visible()
    assert any(XSS in t for t in answers.all_text_contents())
    assert XSS in item.locator("table.rubric").text_content()  # the judge explanation, as text
    not_pwned(pg)
    pg.fill("input.filter", "Question 17:")
    assert pg.locator("details.item:not(.hidden)").count() == 1
    assert "s17" in pg.locator("details.item:not(.hidden) summary").text_content()


def test_viewer_navigate_filter_review_and_escaping(page: object, tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    build_store(db, SynthSpec(n_samples=80, n_models=3)).close()
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"
    pg = page
    expect = pytest.importorskip(
        "playwright.sync_api"
    ).expect  # waits without eval (the page's CSP forbids it)
    try:
        pg.goto(base)
        pg.locator("a.run-link", has_text="scripted/model-00").click()
        pg.wait_for_selector("#items")
        assert "page 1 of 2 (80 questions)" in pg.locator("#pager").text_content()
        pg.locator("a.item-link").first.click()
        pg.wait_for_selector("#answers")
        texts = pg.locator("pre.ans").all_text_contents()
        assert any(XSS in t for t in texts)
        assert XSS in pg.locator("#rubric").text_content()
        not_pwned(pg)
        # filter: unknown verdicts only, then a search
        pg.goto(base + "#/items")
        pg.wait_for_selector("#items")
        pg.check("#f-unknown")
        pg.click("#f-apply")
        pg.wait_for_url(re.compile("unknown=1"))
        pg.wait_for_selector("#items")
        st = Store(db)
        n_unknown_items = st.db.execute(
            "SELECT COUNT(DISTINCT sample_id) FROM grades WHERE n_unknown > 0"
        ).fetchone()[0]
        st.close()
        expect(pg.locator("#pager")).to_contain_text(f"({n_unknown_items} questions)")
        pg.uncheck("#f-unknown")
        pg.fill("#f-q", "pwned")
        pg.click("#f-apply")
        expect(pg.locator("a.item-link")).to_have_count(1)
        pg.locator("a.item-link").first.click()
        pg.wait_for_selector("#rubric")
        # a clinician review of the first criterion of the first answer
        pg.fill("#reviewer", "Dr Wang 王")
        form = pg.locator("#rubric form.rv").first
        form.locator("select.rv-verdict").select_option("unmet")
        form.locator("input.rv-reason").fill("misses <b>dose</b> check")
        form.locator("button.rv-submit").click()
        expect(pg.locator("#status")).to_have_text("review saved")
        assert (
            "reviewer Dr Wang 王: unmet (misses <b>dose</b> check"
            in pg.locator("#rubric").text_content()
        )
        not_pwned(pg)
        st = Store(db)
        row = st.db.execute(
            "SELECT reviewer, verdict, reason, criterion_id FROM reviews"
        ).fetchone()
        st.close()
        assert tuple(row) == ("Dr Wang 王", "unmet", "misses <b>dose</b> check", "c0")
        # a review without a name is refused and says why
        pg.fill("#reviewer", "")
        pg.locator("#rubric form.rv").first.locator("input.rv-reason").fill("x")
        pg.locator("#rubric form.rv").first.locator("button.rv-submit").click()
        expect(pg.locator("#status")).to_contain_text(
            "review not saved: a review needs the reviewer's name"
        )
    finally:
        srv.shutdown()
        srv.server_close()


def test_viewer_runs_as_columns_and_logprob_options(page: object, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_viewer import _demo_store

    db = tmp_path / "demo.db"
    with ThreadPoolExecutor(1) as pool:  # the runner's event loop cannot run inside Playwright's
        runs = pool.submit(_demo_store, db).result()
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"
    pg = page
    expect = pytest.importorskip("playwright.sync_api").expect
    try:
        pg.goto(base)
        pg.wait_for_selector("#runs")
        assert (
            "judge" not in pg.locator("#runs tr").first.text_content()
        )  # no judge column: no run has a judge
        assert pg.locator("a.run-link").count() == 4
        pg.goto(base + "#/items")
        pg.wait_for_selector("#items")
        heads = pg.locator("#items th.col-head").all_text_contents()
        assert (
            len(heads) == 4
            and len(set(heads)) == 4
            and all(h.startswith("scripted/a · ") for h in heads)
        )
        first = runs["gen"].samples[0]
        link = pg.locator("a.item-link").first
        assert link.text_content() == f"{first.id}: {first.metadata['question']}"
        link.click()
        pg.wait_for_selector("#answers")
        answers = pg.locator("#answers .answer")
        expect(answers).to_have_count(4)
        text = pg.locator("#answers").text_content()
        assert "judge" not in text and "(no answer" not in text
        assert pg.locator("table.opts").count() == 2  # next-token and text-loglik
        chosen = pg.locator("table.opts tr.chosen")
        assert chosen.count() == 2 and all("chosen" in t for t in chosen.all_text_contents())
        tok = pg.locator(".answer", has=pg.locator("b", has_text="next-token")).locator(
            "table.opts"
        )
        assert (
            "-1.000" in tok.locator("tr.chosen").text_content()
            and "64.4%" in tok.locator("tr.chosen").text_content()
        )
        assert "key" in tok.locator("tr", has_text=first.choices[first.target]).text_content()
    finally:
        srv.shutdown()
        srv.server_close()


def test_viewer_shows_the_messages_each_run_sent(page: object, tmp_path: Path) -> None:
    """MedQA answered under the reference protocol and as next-token log-probabilities: the page
    shows, under each answer, exactly the messages its run's stored request holds, and not the
    sample's own (grandrounds) prompt as if it had been sent."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import shared_file
    from tests.test_viewer_sent import _runs

    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    with ThreadPoolExecutor(1) as pool:  # the runner's event loop cannot run inside Playwright's
        runs = pool.submit(_runs, db, data).result()
    st = Store(db)
    try:
        sent = {}
        sid = runs["reference"].samples[0].id
        for name, outcome in runs.items():
            key = st.answer(outcome.run.id, sid)[0]
            row = st.db.execute("SELECT request_json FROM calls WHERE key = ?", (key,)).fetchone()
            sent[name] = [m["content"] for m in json.loads(row[0])["messages"]]
    finally:
        st.close()
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"
    pg = page
    try:
        pg.goto(base + "#/items")
        pg.wait_for_selector("#items")
        pg.locator("a.item-link").first.click()
        pg.wait_for_selector("#answers")
        assert "The question as stored" in pg.locator(".sent-label").first.text_content()
        for name, outcome in runs.items():
            card = pg.locator(".answer", has=pg.locator("b", has_text=outcome.run.id[:8]))
            card.locator("details.sent summary").click()
            shown = [
                t.split(": ", 1)[1] for t in card.locator("details.sent .q").all_text_contents()
            ]
            assert shown == sent[name], name
        assert sent["reference"] != sent["logprob"]
    finally:
        srv.shutdown()
        srv.server_close()
