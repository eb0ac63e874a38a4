"""The viewer's JSON API over a real loopback server: pages, filters, search, drill-down, reviews."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from grandrounds.reviews import fill_queue
from grandrounds.store import Store
from grandrounds.viewer.page import APP_JS
from grandrounds.viewer.server import make_server
from tests.synthetic import XSS, SynthSpec, build_store


@pytest.fixture
def viewer(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "v.db"
    st = build_store(db, SynthSpec(n_samples=120, n_models=4))
    fill_queue(st, share=0.0)
    st.close()
    srv = make_server(db, port=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", db
    srv.shutdown()
    srv.server_close()


def get(base: str, path: str, **params: Any) -> Any:
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url) as r:
        return json.load(r)


def post(base: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(base + "/api/review", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"} | (headers or {}))
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_pages_and_facets(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    f = get(base, "/api/facets")
    assert f["benchmarks"] == ["healthbench"] and len(f["models"]) == 4 and "axis:accuracy" in f["dimensions"]
    p1, p3 = get(base, "/api/items", per_page=50), get(base, "/api/items", per_page=50, page=3)
    assert p1["total"] == 120 and len(p1["items"]) == 50 and len(p3["items"]) == 20
    assert {i["sample_id"] for i in p1["items"]}.isdisjoint(i["sample_id"] for i in p3["items"])
    assert len(p1["items"][0]["values"]) == 4


def test_filters_match_the_store(viewer: tuple[str, Path]) -> None:
    base, db = viewer
    st = Store(db)
    statuses: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    unknown_items = set()
    for sid, gj in st.db.execute("SELECT sample_id, grade_json FROM grades"):
        for v in json.loads(gj)["verdicts"]:
            statuses[sid][v["criterion_id"]].add(v["status"])
            if v["status"] == "unknown":
                unknown_items.add(sid)
    st.close()
    disagree = {s for s, cs in statuses.items() if any({"met", "unmet"} <= x for x in cs.values())}
    assert get(base, "/api/items", disagree=1, per_page=200)["total"] == len(disagree)
    got = {i["sample_id"] for i in get(base, "/api/items", unknown=1, per_page=200)["items"]}
    assert got == unknown_items and got
    assert get(base, "/api/items", verdict="unknown", per_page=200)["total"] == len(unknown_items)
    theme = get(base, "/api/items", dimension="theme:hedging", per_page=200)
    assert theme["total"] == 24 and all(int(i["sample_id"][1:]) % 5 == 1 for i in theme["items"])
    assert get(base, "/api/items", model="scripted/model-03")["total"] == 120
    assert get(base, "/api/items", model="nobody")["total"] == 0
    assert get(base, "/api/items", queued=1, per_page=200)["total"] >= len(unknown_items)


def test_search_fts_chinese_and_injection(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    hit = get(base, "/api/items", q="window.__pwned")
    assert [i["sample_id"] for i in hit["items"]] == ["s0"]  # found in an answer
    zh = get(base, "/api/items", q="患者", per_page=200)  # two characters: LIKE fallback
    assert zh["total"] > 0 and all(int(i["sample_id"][1:]) % 7 == 3 for i in zh["items"])
    assert get(base, "/api/items", q="Question 17:")["items"][0]["sample_id"] == "s17"
    for nasty in ['" OR', "AND (", "a*", "%", "_", "NEAR(x y)"]:
        get(base, "/api/items", q=nasty)  # no FTS syntax error reaches the user


def test_item_drilldown_keeps_payload_as_data(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    first = get(base, "/api/items", per_page=1)["items"][0]
    d = get(base, f"/api/item/{first['id']}")
    assert d["sample"]["id"] == "s0" and len(d["answers"]) == 4
    a0 = next(a for a in d["answers"] if a["model"] == "scripted/model-00")
    assert XSS in a0["text"] and len(a0["verdicts"]) == 6
    a1 = next(a for a in d["answers"] if a["model"] == "scripted/model-01")
    assert XSS in next(v["explanation"] for v in a1["verdicts"] if v["criterion_id"] == "c0")
    with pytest.raises(urllib.error.HTTPError):
        get(base, "/api/item/999999")


def test_review_post_validation_and_csrf(viewer: tuple[str, Path]) -> None:
    base, db = viewer
    d = get(base, "/api/item/2")
    a = d["answers"][0]
    body = {"run_id": a["run_id"], "grader_fp": a["grader_fp"], "sample_id": d["sample"]["id"], "criterion_id": "c1", "verdict": "met", "reviewer": "Dr A", "reason": "clear"}
    code, out = post(base, body)
    assert code == 200 and out["id"] >= 1
    assert post(base, body | {"reviewer": ""})[0] == 400
    assert post(base, body | {"verdict": "<b>"})[0] == 400
    assert post(base, body | {"criterion_id": "", "verdict": None, "score": "abc"})[0] == 400
    assert post(base, body, {"Origin": "http://evil.example"})[0] == 403
    assert post(base, body, {"Content-Type": "text/plain"})[0] == 415
    again = get(base, "/api/item/2")["answers"][0]
    assert [r["verdict"] for r in again["reviews"]] == ["met"]
    assert again["verdicts"] == a["verdicts"]  # the judge's verdicts are untouched
    st = Store(db)
    assert st.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 1
    st.close()


def test_page_headers_and_script_never_uses_innerhtml(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    with urllib.request.urlopen(base + "/") as r:
        csp = r.headers["Content-Security-Policy"]
        page = r.read().decode()
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert '<script src="/app.js">' in page and "innerHTML" not in APP_JS and "insertAdjacentHTML" not in APP_JS


def test_index_rebuilds_when_the_store_changes(viewer: tuple[str, Path]) -> None:
    import time

    base, db = viewer
    assert get(base, "/api/items")["total"] == 120
    st = build_store(db.with_name("other.db"), SynthSpec(n_samples=5, n_models=1, benchmark="healthbench_hard", seed=3))
    st.close()
    st = Store(db)
    src = Store(db.with_name("other.db"))
    for table in ("samples", "runs", "calls", "answers", "graders", "grades", "results"):
        rows = src.db.execute(f"SELECT * FROM {table}").fetchall()
        st.db.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * len(rows[0]))})", [tuple(r) for r in rows])
    st.close()
    src.close()
    time.sleep(2.1)
    assert get(base, "/api/items")["total"] == 125
    assert get(base, "/api/items", benchmark="healthbench_hard")["total"] == 5
