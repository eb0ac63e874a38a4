"""The viewer against hostile requests: raw HTTP with forged Host and Origin, missing tokens,
bad review scores, oversized searches, malformed and half-sent requests, idle and excess
connections; and, in Chromium, a DNS-rebinding page (``--host-resolver-rules``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grandrounds.analyses.review_scales import score_range
from grandrounds.store import Store
from grandrounds.viewer import queries
from grandrounds.viewer.httpd import ViewerServer
from grandrounds.viewer.security import HostPolicy, split_host
from grandrounds.viewer.server import make_server
from tests.synthetic import SynthSpec, build_store
from tests.test_viewer import Client


def start(db: Path, **kw: Any) -> tuple[ViewerServer, str]:
    srv = make_server(db, port=0, **kw)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def stop(srv: ViewerServer) -> None:
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def store_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sec") / "v.db"
    build_store(db, SynthSpec(n_samples=60, n_models=2)).close()
    return db


@pytest.fixture(autouse=True)
def no_reviews_left(store_db: Path) -> Iterator[None]:
    """Each test starts from a store without reviews (the store is shared by the module)."""
    yield
    with Store(store_db) as st:
        st.db.execute("DELETE FROM reviews")


@pytest.fixture
def viewer(store_db: Path) -> Iterator[tuple[ViewerServer, str]]:
    srv, base = start(store_db, idle_timeout=1.0)
    yield srv, base
    stop(srv)


def raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send bytes on a fresh connection and read until the server closes it (or ``wait`` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/") else 0


def review_body(db: Path, **over: Any) -> dict[str, Any]:
    st = Store(db)
    fp = st.latest_grader_fp("run00")
    st.close()
    return {
        "run_id": "run00",
        "grader_fp": fp,
        "sample_id": "s1",
        "reviewer": "Dr A",
        "reason": "r",
    } | over


# ---- Host ------------------------------------------------------------------------------------


def test_forged_host_is_refused_everywhere(
    viewer: tuple[ViewerServer, str], store_db: Path
) -> None:
    srv, base = viewer
    port = srv.server_address[1]
    for host in (
        f"evil.test:{port}",
        f"127.0.0.1:{port + 1}",
        "127.0.0.1",
        f"127.0.0.1.evil.test:{port}",
        f"user@127.0.0.1:{port}",
        "",
    ):
        c = Client(base, host)
        for path in ("/", "/app.js", "/api/runs", "/api/items", "/api/item/1"):
            code, _, body = c.request("GET", path)
            assert code == 421 and b"run00" not in body, (host, path)
        code, _, _ = c.request(
            "POST",
            "/api/review",
            json.dumps(review_body(store_db, score=0.5)).encode(),
            {"Content-Type": "application/json", "Origin": f"http://{host}"},
        )
        assert code == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        code, _, body = Client(base, host).request("GET", "/api/runs")
        assert code == 200 and b"run00" in body, host
    # no Host at all, and two of them
    assert status(raw(port, b"GET /api/runs HTTP/1.0\r\n\r\n")) == 421
    assert (
        status(
            raw(
                port,
                f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.test:{port}\r\n\r\n".encode(),
            )
        )
        == 421
    )
    with Store(store_db) as st:
        assert st.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 0


def test_host_policy_per_bind() -> None:
    lo = HostPolicy.for_bind("127.0.0.1", 8765)
    assert lo.allows("127.0.0.1:8765") and lo.allows("localhost:8765") and lo.allows("[::1]:8765")
    assert (
        not lo.allows("localhost")
        and not lo.allows("evil.test:8765")
        and not lo.allows("127.0.0.2:8765")
    )
    lan = HostPolicy.for_bind("192.168.1.5", 80)
    assert (
        lan.allows("192.168.1.5")
        and lan.allows("192.168.1.5:80")
        and not lan.allows("localhost:80")
    )
    anyip = HostPolicy.for_bind("0.0.0.0", 9000, extra=("viewer.lab",))
    assert (
        anyip.allows("10.0.0.7:9000")
        and anyip.allows("[fe80::1]:9000")
        and anyip.allows("viewer.lab:9000")
    )
    assert anyip.allows(f"{socket.gethostname().lower()}:9000")
    assert not anyip.allows("evil.test:9000") and not anyip.allows("10.0.0.7:9001")
    assert (
        split_host("[::1]:8765") == ("[::1]", 8765)
        and split_host("a:b") is None
        and split_host("[::1") is None
    )


# ---- access token ------------------------------------------------------------------------


def test_token_required_then_kept_in_a_cookie(store_db: Path) -> None:
    srv, base = start(store_db, require_token=True, token="s3cret-token-xyz")
    try:
        c = Client(base)
        assert c.request("GET", "/api/runs")[0] == 403
        assert c.request("GET", "/api/runs?token=wrong")[0] == 403
        assert c.request("GET", "/")[0] == 403 and c.request("GET", "/app.js")[0] == 403
        code, headers, _ = c.request("GET", "/?token=s3cret-token-xyz")
        assert code == 303 and headers["Location"] == "/"
        assert c.cookies[f"grandrounds_token_{srv.server_address[1]}"] == "s3cret-token-xyz"
        set_cookie = headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        code, _, body = c.request("GET", "/api/runs")  # the cookie alone, as links in the page work
        assert code == 200 and b"run00" in body
        c.open_page()
        assert c.post_review(review_body(store_db, score=0.5))[0] == 200
        stranger = Client(base)
        stranger.cookies = {f"grandrounds_token_{srv.server_address[1]}": "s3cret-token-xy"}
        assert stranger.request("GET", "/api/runs")[0] == 403
    finally:
        stop(srv)


def test_binding_beyond_loopback_warns_and_prints_a_token_url(
    store_db: Path, tmp_path: Path
) -> None:
    env = os.environ | {"COLUMNS": "200"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grandrounds",
            "view",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--store",
            str(store_db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        assert lines[0].startswith("warning: the viewer listens on 0.0.0.0")
        url = lines[1].split("viewer on ", 1)[1].split()[0]
        assert "?token=" in url and len(url.split("?token=")[1]) >= 32
        base, token = url.split("/?token=")
        c = Client(base)
        assert c.request("GET", "/api/runs")[0] == 403
        code, _, body = c.request("GET", f"/api/runs?token={token}")
        assert code == 200 and b"run00" in body
        port = int(base.rsplit(":", 1)[1])
        assert (
            Client(base, f"evil.test:{port}").request("GET", f"/api/runs?token={token}")[0] == 421
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---- POST: Origin and CSRF token -------------------------------------------------------------


def test_review_posts_need_same_origin_and_the_session_csrf_token(
    viewer: tuple[ViewerServer, str], store_db: Path
) -> None:
    _, base = viewer
    body = review_body(store_db, criterion_id="c1", verdict="met")
    c = Client(base)
    c.open_page()
    assert c.post_review(body, {"Origin": None})[0] == 403  # no Origin, no Referer
    assert c.post_review(body, {"Origin": "http://evil.test"})[0] == 403
    assert c.post_review(body, {"Origin": "null"})[0] == 403
    assert c.post_review(body, {"Origin": None, "Referer": "http://evil.test/page"})[0] == 403
    assert c.post_review(body, csrf=False)[0] == 403
    assert c.post_review(body | {"csrf": "0" * 64}, csrf=False)[0] == 403
    other = Client(base)
    other.open_page()
    assert other.csrf != c.csrf
    c2 = Client(base)
    c2.cookies, c2.csrf = dict(c.cookies), other.csrf  # a token from another session
    assert c2.post_review(body)[0] == 403
    nocookie = Client(base)
    nocookie.csrf = c.csrf
    assert nocookie.post_review(body)[0] == 403
    assert c.post_review(body, {"Content-Type": "text/plain"})[0] == 415
    code, out = c.post_review(
        body, {"Origin": None, "Referer": f"{base}/#/item/2"}
    )  # Referer stands in for a missing Origin
    assert code == 200 and out["id"] >= 1
    assert c.post_review(body)[0] == 200
    with Store(store_db) as st:
        n = st.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0]
        st.db.execute("DELETE FROM reviews")
    assert n == 2


# ---- review scores on the benchmark's scale -----------------------------------------------------


def test_review_scores_must_be_on_the_scale(
    viewer: tuple[ViewerServer, str], store_db: Path
) -> None:
    _, base = viewer
    c = Client(base)
    c.open_page()
    st = Store(store_db)
    run = st.get_run("run00")
    fp = st.latest_grader_fp("run00")
    sample = st.sample(run.benchmark, run.dataset_sha256, "s1")
    st.close()
    # the synthetic grading is HealthBench's: met positive points over possible points, negatives subtract
    neg = sum(x.points for x in sample.rubric if x.points < 0)
    pos = sum(x.points for x in sample.rubric if x.points > 0)
    from grandrounds.graders import grader_from_fingerprint

    with Store(store_db) as st:
        grader = grader_from_fingerprint(st.grader_spec(fp))
        grade = st.grade("run00", fp, "s1")
    lo, hi = score_range(grader, sample, grade)
    assert (lo, hi) == (pytest.approx(min(0.0, neg / pos)), 1.0)
    for bad in (99, -5, 1e300, "1e999", "NaN", "abc", True, [1]):
        code, out = c.post_review(review_body(store_db, score=bad))
        assert code == 400 and ("scale" in out["error"] or "number" in out["error"]), (bad, out)
    assert (
        "outside this benchmark's scale ("
        in c.post_review(review_body(store_db, score=99))[1]["error"]
    )
    for literal in (
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e400",
    ):  # JSON extensions Python reads as floats
        data = (
            json.dumps(review_body(store_db, csrf=c.csrf)).encode()[:-1]
            + b', "score": '
            + literal
            + b"}"
        )
        code, _, out = c.request(
            "POST", "/api/review", data, {"Content-Type": "application/json", "Origin": base}
        )
        assert code == 400 and b"finite" in out, literal
    for good in (0.0, 0.5, 1, "0.25"):
        assert c.post_review(review_body(store_db, score=good))[0] == 200
    if lo < 0:
        assert c.post_review(review_body(store_db, score=lo))[0] == 200
    with Store(store_db) as st:
        scores = [r["score"] for r in st.reviews(run_id="run00")]
        st.db.execute("DELETE FROM reviews")
    assert sorted(scores) == sorted([0.0, 0.5, 1.0, 0.25] + ([lo] if lo < 0 else []))


def test_score_range_of_exams_and_unknown_graders() -> None:
    from grandrounds.core.records import Grade, Message, Sample

    s = Sample(
        id="1",
        benchmark="demo",
        messages=(Message("user", "q"),),
        target="A",
        choices={"A": "x", "B": "y"},
    )
    assert score_range(None, s, Grade(sample_id="1", value=1.0)) == (0.0, 1.0)
    assert score_range(
        None, s, Grade(sample_id="1", value=3.0), observed=[1.0, 5.0, float("nan"), None]
    ) == (
        0.0,
        5.0,
    )  # a grading's own values stay allowed


# ---- search caps, time and memory ---------------------------------------------------------------


def test_search_input_is_capped(viewer: tuple[ViewerServer, str]) -> None:
    _, base = viewer
    c = Client(base)
    import urllib.parse

    def search(q: str) -> tuple[int, Any]:
        code, _, body = c.request("GET", "/api/items?" + urllib.parse.urlencode({"q": q}))
        return code, json.loads(body)

    code, out = search("患者发热" * 20)  # 80 characters in one word
    assert code == 400 and "limited to 64 characters" in out["error"]
    code, out = search(" ".join(["fever"] * 9))
    assert code == 400 and "limited to 8 words" in out["error"]
    code, out = search("a " * 150)
    assert code == 400 and "limited to 200 characters" in out["error"]
    code, out = search("患者发热" * 16)  # 64 characters: allowed
    assert code == 200
    code, out = search(
        " ".join(["fever", "患者", "dose", "ab", "rash", "renal", "cough", "%_"])
    )  # 8 words, LIKE path
    assert code == 200 and out["total"] >= 0


def test_queries_are_bounded_in_time(store_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    con = sqlite3.connect(":memory:")
    t = time.monotonic()
    with pytest.raises(queries.QueryTooSlow, match="longer than 0.2 s"):
        with queries.time_bounded(con, 0.2):
            con.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
            ).fetchone()
    assert time.monotonic() - t < 5
    assert con.execute("SELECT 1").fetchone() == (1,)  # the connection is usable afterwards
    srv, base = start(store_db)
    try:
        monkeypatch.setattr(queries, "QUERY_SECONDS", 0.0)
        code, _, body = Client(base).request(
            "GET", "/api/items?q=" + "%20".join(["do", "fe", "re", "in", "pa", "se", "al", "ch"])
        )  # ~20,000 SQLite steps
        assert code == 503 and b"narrow the search" in body
    finally:
        stop(srv)


# ---- malformed, half-sent, idle, too many ---------------------------------------------------------


def test_malformed_requests_always_get_an_answer(
    viewer: tuple[ViewerServer, str], store_db: Path
) -> None:
    srv, base = viewer
    port = srv.server_address[1]
    host = f"Host: 127.0.0.1:{port}\r\n"
    cases = {
        b"GARBAGE\r\n\r\n": 400,
        b"GET / HTTP/9.9\r\n\r\n": 505,
        f"GET /api/items?page=abc HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /api/items?page=99999999999999999999 HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /api/items?per_page=-1 HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /api/item/99999999999999999999 HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /api/item/abc HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /api/items?{'&'.join(f'x{i}=1' for i in range(100))} HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET http://evil.test/ HTTP/1.1\r\n{host}\r\n".encode(): 400,
        f"GET /{'a' * 70000} HTTP/1.1\r\n{host}\r\n".encode(): 414,
        f"GET / HTTP/1.1\r\n{host}X-Big: {'b' * 70000}\r\n\r\n".encode(): 431,
        f"DELETE /api/review HTTP/1.1\r\n{host}\r\n".encode(): 405,
        f"POST /api/review HTTP/1.1\r\n{host}Origin: http://127.0.0.1:{port}\r\nContent-Type: application/json\r\n\r\n".encode(): 411,
        f"POST /api/review HTTP/1.1\r\n{host}Origin: http://127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n".encode(): 400,
        f"POST /api/review HTTP/1.1\r\n{host}Origin: http://127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n".encode(): 413,
    }
    for data, want in cases.items():
        assert status(raw(port, data)) == want, data[:80]
    c = Client(base)
    c.open_page()
    for body in (
        b"[]",
        b"not json",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"score": {"a": 1}}',
        b'{"reviewer": 5}',
        b"\xff\xfe",
    ):
        data = body if len(body) < 90_000 else b"[" * 45_000 + b"]" * 45_000
        code, _, out = c.request(
            "POST", "/api/review", data, {"Content-Type": "application/json", "Origin": base}
        )
        assert code == 400 and out, body[:20]
    assert c.request("GET", "/api/runs")[0] == 200  # still serving


def test_half_sent_request_gets_408_and_idle_connection_is_closed(
    viewer: tuple[ViewerServer, str],
) -> None:
    srv, _ = viewer
    port = srv.server_address[1]
    t = time.monotonic()
    got = raw(
        port, f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode(), wait=10
    )  # headers never finished
    assert status(got) == 408 and time.monotonic() - t < 5
    t = time.monotonic()
    got = raw(
        port,
        f"POST /api/review HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":'.encode(),
        wait=10,
    )  # body never finished
    assert status(got) == 408 and time.monotonic() - t < 5
    t = time.monotonic()
    assert (
        raw(port, b"", wait=10) == b""
    )  # an idle connection: closed by the server, no answer needed
    assert 0.8 < time.monotonic() - t < 5


def test_handler_threads_are_bounded(store_db: Path) -> None:
    srv, base = start(store_db, max_threads=2, idle_timeout=3.0, slot_wait=0.2)
    port = srv.server_address[1]
    before = threading.active_count()
    try:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]  # hold both slots
        time.sleep(0.3)
        extra = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(6)]
        for s in extra:
            s.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answers = [s.recv(200) for s in extra]
        assert all(status(a) == 503 and b"Retry-After: 1" in a for a in answers)
        assert threading.active_count() - before <= 2
        for s in idle + extra:
            s.close()
        time.sleep(0.5)
        code, _, body = Client(base).request("GET", "/api/runs")  # slots freed: served again
        assert code == 200 and b"run00" in body
    finally:
        stop(srv)


# ---- DNS rebinding in a real browser ------------------------------------------------------------

ATTACK = """<!doctype html><title>rebinding</title><script>
window.attack = async () => {
  const out = {};
  let csrf = '';
  try {
    const r = await fetch('/'); const text = await r.text(); out.page = [r.status, text];
    const m = text.match(/name="csrf-token" content="([^"]+)"/); if (m) csrf = m[1];
  } catch (e) { out.page = ['error', String(e)]; }
  try { const r = await fetch('/api/runs'); out.runs = [r.status, await r.text()]; } catch (e) { out.runs = ['error', String(e)]; }
  try {
    const r = await fetch('/api/review', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({csrf, run_id: 'run00', grader_fp: FP, sample_id: 's1', reviewer: 'evil', reason: 'x', score: 0})});
    out.review = [r.status, await r.text()];
  } catch (e) { out.review = ['error', String(e)]; }
  return out;
};
</script>"""


def rebinding_attack(
    browser: Any, db: Path, fp: str, allow_hosts: tuple[str, ...]
) -> dict[str, Any]:
    """DNS rebinding, as a browser lives it: the page of http://evil.test:PORT/ comes from the
    attacker's server; then the same name and port lead to the viewer (here the attacker's server
    stops and the viewer starts on its port; Chromium resolves evil.test to 127.0.0.1 throughout),
    and the page's script, still of origin evil.test:PORT, asks the viewer for runs and posts a review."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    body = ATTACK.replace("FP", json.dumps(fp)).encode()

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    attacker = HTTPServer(("127.0.0.1", 0), Attacker)
    port = attacker.server_address[1]
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    pg = browser.new_page()
    try:
        pg.goto(f"http://evil.test:{port}/")
        attacker.shutdown()
        attacker.server_close()
        srv = make_server(db, "127.0.0.1", port, allow_hosts=allow_hosts)  # the "rebound" address
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            assert pg.evaluate("location.host") == f"evil.test:{port}"
            return pg.evaluate("attack()")
        finally:
            stop(srv)
    finally:
        pg.close()


@pytest.mark.browser
def test_dns_rebinding_page_cannot_read_runs_in_chromium(store_db: Path) -> None:
    from tests.test_browser import launch_chromium

    with Store(store_db) as st:
        fp = st.latest_grader_fp("run00")
    with launch_chromium(["--host-resolver-rules=MAP evil.test 127.0.0.1"]) as browser:
        guarded = rebinding_attack(browser, store_db, fp, ())
        unguarded = rebinding_attack(
            browser, store_db, fp, ("evil.test",)
        )  # the viewer told to accept that name: the attack's control
    assert guarded["page"][0] == 421 and "csrf-token" not in guarded["page"][1]
    assert guarded["runs"][0] == 421 and "run00" not in guarded["runs"][1]
    assert guarded["review"][0] == 421
    # without the Host check the same page reads every run, takes a session and its CSRF token, and posts
    assert (
        unguarded["page"][0] == 200
        and unguarded["runs"][0] == 200
        and "run00" in unguarded["runs"][1]
    )
    assert unguarded["review"][0] == 200
    with Store(store_db) as st:
        assert (
            st.db.execute("SELECT COUNT(*) FROM reviews WHERE reviewer = 'evil'").fetchone()[0] == 1
        )  # the unguarded one only


def test_a_request_trickled_byte_by_byte_is_cut_off(viewer: tuple[ViewerServer, str]) -> None:
    srv, _ = viewer  # idle timeout 1 s: each byte arrives in time, the whole request does not (3 s)
    port = srv.server_address[1]
    request = (
        f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: {'a' * 100}\r\n\r\n".encode()
    )
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        sent = 0
        try:
            for i in range(len(request)):
                s.sendall(request[i : i + 1])
                sent += 1
                time.sleep(0.5)
        except OSError:
            pass
        closed_after = time.monotonic() - t
        s.settimeout(2)
        try:
            rest = s.recv(100)
        except OSError:
            rest = b""
    assert sent < len(request) or rest == b"", "the server kept reading"
    assert closed_after < 8 and rest == b""
