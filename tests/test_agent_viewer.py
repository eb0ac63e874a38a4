"""What a clinician sees of an agent run: the viewer's API and the page (in Chromium) show each
episode as a transcript (the model's messages, each tool call with its arguments, what the tool
answered, the sandbox's refusals, the final answer and the grader's checks), the HTML report
shows the same, and model text in a transcript stays text."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.records import Request, ToolCallPart
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.reports import build_report
from grandrounds.store import Store
from grandrounds.viewer.server import make_server
from tests.conftest import shared_file
from tests.test_agents import medcalc_rows, truth_of

pytestmark = pytest.mark.bwrap  # the episodes run the python tool

XSS = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=1>"


def _agent_store(db: Path) -> None:
    rows = medcalc_rows(3)

    def script(req: Request) -> object:
        row = truth_of("\n".join(m.text for m in req.messages), rows)
        results = [r for m in req.messages for r in m.tool_results]
        if not results:
            return [
                ToolCallPart(
                    "t1", "python", json.dumps({"code": "print(open('/etc/passwd').read())"})
                ),
                ToolCallPart("t2", "calculator", json.dumps({"expression": "3 * 7"})),
            ]
        value = row["Ground Truth Answer"] if row["Row Number"] != "2" else "-1"
        return json.dumps({"step_by_step_thinking": XSS, "answer": value})

    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=script, **options)

    data = shared_file("medcalc-bench", "test_data.csv")
    with PROVIDERS.registered("viewbot", Bot):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medcalc-bench-tools",
                "--data",
                str(data),
                "--limit",
                "3",
                "-m",
                "viewbot/x",
                "--store",
                str(db),
                "--protocol",
                "grandrounds",
            ],
        )
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def agent_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("agentview") / "a.db"
    with ThreadPoolExecutor(1) as pool:  # the runner's event loop cannot run inside Playwright's
        pool.submit(_agent_store, db).result()
    return db


def test_api_item_has_the_transcript(agent_db):
    from grandrounds.viewer.api import api_get
    from grandrounds.viewer.state import ViewerState

    state = ViewerState(agent_db)
    con = state.con() if hasattr(state, "con") else None
    assert con is not None
    _, listing = api_get(state, "/api/items", {})
    first = listing["items"][0]
    code, item = api_get(state, f"/api/item/{first['id']}", {})
    assert code == 200
    [answer] = item["answers"]
    [episode] = answer["episodes"]
    assert episode["status"] == "finished" and len(episode["steps"]) == 2
    step = episode["steps"][0]
    assert [c["name"] for c in step["tool_calls"]] == ["python", "calculator"]
    python_event, calc_event = step["events"]
    assert python_event["refused"] and python_event["refused"][0].startswith("open")
    assert calc_event["text"] == "21"
    assert answer["epochs"][0]["checks"][0]["name"] == "answer correct"


def test_report_shows_transcript(agent_db, tmp_path):
    st = Store(agent_db)
    try:
        [out] = build_report(st, "html", tmp_path / "report.html")
    finally:
        st.close()
    html = out.read_text(encoding="utf-8")
    assert "calls python" in html and "sandbox refused" in html and "answer correct" in html
    assert (
        "<small class='episodes'>episodes: finished 3</small>" in html
    )  # under the score, in the leaderboard
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned" in html


def test_viewer_page_shows_transcript(agent_db, tmp_path):
    from tests.test_browser import launch_chromium

    srv = make_server(agent_db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"
    try:
        with launch_chromium() as browser:
            pg = browser.new_page()
            dialogs: list[str] = []
            pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            pg.goto(base + "#/items")
            pg.wait_for_selector("#items")
            pg.locator("a.item-link", has_text="2:").first.click()
            pg.wait_for_selector(".transcript")
            text = pg.locator(".transcript").text_content()
            assert "episode 1 · finished · failure" in text
            assert (
                "calls python" in text and "calls calculator" in text and "calculator: 21" in text
            )
            assert "sandbox refused: open" in text
            assert "FAILED: answer correct" in text
            assert XSS in text  # the model's text, shown as text
            assert pg.evaluate("typeof window.__pwned") == "undefined" and dialogs == []
            shot = tmp_path / "transcript.png"
            pg.locator(".transcript").screenshot(path=str(shot))
            assert shot.stat().st_size > 2000
            pg.close()
    finally:
        srv.shutdown()
        srv.server_close()
