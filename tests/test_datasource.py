"""Downloading a benchmark's public files into the checksummed cache, against a loopback HTTP server.

Files are served from a temporary directory by a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 in a
background thread; its handler counts requests so a test can tell a cache hit from a download.
Nothing here touches any network beyond 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RemoteFile
from grandrounds.benchmarks.medqa import MedQA
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.sources.data import cache_dir, fetch, resolve

PAYLOAD = b"".join(
    b"line %d of a public benchmark file\n" % i for i in range(5000)
)  # ~170 kB, several reads
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()

MEDQA_RECORDS = [
    {
        "question": "A 23-year-old woman presents with fever and dysuria. Which organism is most likely?",
        "answer": "Escherichia coli",
        "options": {
            "A": "Escherichia coli",
            "B": "Proteus mirabilis",
            "C": "Klebsiella",
            "D": "Enterococcus",
        },
        "answer_idx": "A",
        "meta_info": "step1",
    },
    {
        "question": "Which drug reverses heparin?",
        "options": {
            "A": "Vitamin K",
            "B": "Protamine sulfate",
            "C": "Idarucizumab",
            "D": "Andexanet alfa",
        },
        "answer_idx": "B",
        "meta_info": "step2&3",
    },
    {
        "question": "First-line treatment of anaphylaxis?",
        "options": {
            "A": "Diphenhydramine",
            "B": "Methylprednisolone",
            "C": "Salbutamol",
            "D": "Intramuscular epinephrine",
        },
        "answer_idx": "D",
        "meta_info": "step2&3",
    },
]
MEDQA_BYTES = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in MEDQA_RECORDS).encode(
    "utf-8"
)
MEDQA_SHA = hashlib.sha256(MEDQA_BYTES).hexdigest()


class LoopbackServer:
    """A ThreadingHTTPServer over ``root`` on 127.0.0.1; ``requests`` lists every path asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        self._lock = threading.Lock()
        handler = partial(_Handler, self, directory=str(root))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.running = True

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def record(self, path: str) -> None:
        with self._lock:
            self.requests.append(path)

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.httpd.shutdown()
            self.httpd.server_close()
            self._thread.join(timeout=5)


class _Handler(SimpleHTTPRequestHandler):
    """Serves files from the directory, plus a few misbehaving endpoints under ``/_/``."""

    def __init__(self, server_state: LoopbackServer, *args, **kwargs) -> None:
        self.state = server_state
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self.state.record(self.path)
        if self.path == "/_/truncated":
            # Promises 1000 bytes, sends 100, closes: an interrupted download.
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 100)
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/_/chunked-truncated":
            # A chunked body whose first chunk (1000 bytes announced) is cut off after 100 bytes.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"3e8\r\n" + b"x" * 100)
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/_/slow":
            time.sleep(1.5)
            self.close_connection = True
            return
        super().do_GET()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """urllib honours *_proxy variables; make sure loopback requests go straight to the server."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    (root / "data.jsonl").write_bytes(PAYLOAD)
    (root / "medqa_mini.jsonl").write_bytes(MEDQA_BYTES)
    srv = LoopbackServer(root)
    yield srv
    srv.stop()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- (1) download into the cache, then serve from it --------------------------------------------


def test_fetch_downloads_with_matching_checksum_then_serves_from_cache(server, tmp_path):
    cache = tmp_path / "cache" / "bench"  # does not exist yet: fetch creates it
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", PAYLOAD_SHA)

    got = fetch(rf, cache, timeout=10)

    assert got == cache / "data.jsonl"
    assert got.read_bytes() == PAYLOAD
    assert _sha(got) == PAYLOAD_SHA
    assert server.requests == ["/data.jsonl"]
    assert sorted(p.name for p in cache.iterdir()) == ["data.jsonl"]  # no .part- leftovers

    server.stop()
    again = fetch(rf, cache, timeout=2)

    assert again == got
    assert again.read_bytes() == PAYLOAD
    assert server.requests == ["/data.jsonl"]  # no second request
    assert sorted(p.name for p in cache.iterdir()) == ["data.jsonl"]


def test_fetch_second_call_with_server_running_makes_no_request(server, tmp_path):
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", PAYLOAD_SHA)
    fetch(rf, tmp_path / "c")
    fetch(rf, tmp_path / "c")
    fetch(rf, tmp_path / "c")
    assert server.requests == ["/data.jsonl"]


def test_fetch_without_checksum_downloads_and_then_trusts_cache(server, tmp_path):
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", None)
    got = fetch(rf, tmp_path / "c")
    assert got.read_bytes() == PAYLOAD
    server.stop()
    assert fetch(rf, tmp_path / "c") == got
    assert server.requests == ["/data.jsonl"]


# ---- (2) checksum mismatch -------------------------------------------------------------------


def test_checksum_mismatch_raises_naming_url_and_both_hashes_and_leaves_nothing(server, tmp_path):
    cache = tmp_path / "cache"
    wrong = "0" * 64
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", wrong)

    with pytest.raises(DataError) as exc:
        fetch(rf, cache, timeout=10)

    msg = str(exc.value)
    assert exc.value.path == rf.url
    assert msg.startswith(rf.url)
    assert "checksum mismatch" in msg
    assert wrong in msg
    assert PAYLOAD_SHA in msg
    assert server.requests == ["/data.jsonl"]
    assert cache.is_dir()
    assert list(cache.iterdir()) == []  # neither data.jsonl nor a .part- file


def test_checksum_mismatch_is_not_reported_as_a_download_failure(server, tmp_path):
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", "f" * 64)
    with pytest.raises(DataError) as exc:
        fetch(rf, tmp_path / "c")
    assert "download failed" not in str(exc.value)


# ---- (3) 404 / connection refused / timeout ----------------------------------------------------


def test_http_404_raises_data_error_suggesting_data_flag(server, tmp_path):
    cache = tmp_path / "cache"
    rf = RemoteFile(server.url("missing.jsonl"), "missing.jsonl", PAYLOAD_SHA)

    with pytest.raises(DataError) as exc:
        fetch(rf, cache, timeout=10)

    msg = str(exc.value)
    assert msg.startswith(rf.url)
    assert "download failed" in msg
    assert "404" in msg
    assert "--data" in msg
    assert server.requests == ["/missing.jsonl"]
    assert list(cache.iterdir()) == []


def test_connection_refused_raises_data_error_suggesting_data_flag(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/data.jsonl"
    cache = tmp_path / "cache"
    rf = RemoteFile(url, "data.jsonl", PAYLOAD_SHA)

    with pytest.raises(DataError) as exc:
        fetch(rf, cache, timeout=5)

    msg = str(exc.value)
    assert msg.startswith(url)
    assert "download failed" in msg
    assert "--data" in msg
    assert not (cache / "data.jsonl").exists()
    assert not any(p.name.startswith(".part-") for p in cache.iterdir())


def test_connection_refused_after_server_stops(server, tmp_path):
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", PAYLOAD_SHA)
    server.stop()
    with pytest.raises(DataError, match="--data"):
        fetch(rf, tmp_path / "cache", timeout=5)
    assert server.requests == []


def test_timeout_raises_data_error(server, tmp_path):
    rf = RemoteFile(server.url("_/slow"), "slow.bin", None)
    t0 = time.monotonic()
    with pytest.raises(DataError, match="--data"):
        fetch(rf, tmp_path / "cache", timeout=0.3)
    assert time.monotonic() - t0 < 1.4  # gave up on the timeout, not when the server hung up
    assert list((tmp_path / "cache").iterdir()) == []


def test_truncated_download_with_checksum_is_rejected(server, tmp_path):
    rf = RemoteFile(server.url("_/truncated"), "t.bin", hashlib.sha256(b"x" * 1000).hexdigest())
    with pytest.raises(DataError, match="download interrupted: 100 of 1000 bytes"):
        fetch(rf, tmp_path / "cache", timeout=5)
    assert list((tmp_path / "cache").iterdir()) == []


# ---- (4) resolve ---------------------------------------------------------------------------


def _loopback_medqa(url: str, sha: str | None = MEDQA_SHA) -> type[MedQA]:
    class LoopbackMedQA(MedQA):
        remote_files = (RemoteFile(url, "phrases_no_exclude_test.jsonl", sha),)

    return LoopbackMedQA


def test_resolve_downloads_into_grandrounds_cache_and_load_reads_samples(
    server, tmp_path, monkeypatch
):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))
    assert cache_dir() == tmp_path / "gr-cache"
    bench = _loopback_medqa(server.url("medqa_mini.jsonl"))()

    root = resolve(bench, None)

    assert root == tmp_path / "gr-cache" / "medqa"
    cached = root / "phrases_no_exclude_test.jsonl"
    assert cached.read_bytes() == MEDQA_BYTES
    assert _sha(cached) == MEDQA_SHA
    assert server.requests == ["/medqa_mini.jsonl"]

    samples = bench.load(root)
    assert [s.id for s in samples] == ["0", "1", "2"]
    assert [s.target for s in samples] == ["A", "B", "D"]
    assert [s.benchmark for s in samples] == ["medqa"] * 3
    assert [s.metadata["meta_info"] for s in samples] == ["step1", "step2&3", "step2&3"]
    assert [s.metadata["question"] for s in samples] == [r["question"] for r in MEDQA_RECORDS]
    assert [dict(s.choices) for s in samples] == [r["options"] for r in MEDQA_RECORDS]
    assert "Protamine sulfate" in samples[1].messages[0].content
    assert bench.dataset_hash(root) == MEDQA_SHA

    # A second resolve is served from the cache, with the server gone.
    server.stop()
    assert resolve(bench, None) == root
    assert server.requests == ["/medqa_mini.jsonl"]


def test_resolve_download_failure_is_data_error(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))
    bench = _loopback_medqa(server.url("nope.jsonl"))()
    with pytest.raises(DataError, match="--data"):
        resolve(bench, None)
    assert list((tmp_path / "gr-cache" / "medqa").iterdir()) == []


def test_resolve_with_missing_data_path_raises_without_downloading(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))
    bench = _loopback_medqa(server.url("medqa_mini.jsonl"))()
    missing = tmp_path / "does" / "not" / "exist.jsonl"

    with pytest.raises(DataError) as exc:
        resolve(bench, missing)

    assert exc.value.path == str(missing)
    assert "not found" in str(exc.value)
    assert server.requests == []
    assert not (tmp_path / "gr-cache").exists()


def test_resolve_with_existing_data_path_uses_it_without_downloading(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))
    local = tmp_path / "local.jsonl"
    local.write_bytes(MEDQA_BYTES)
    bench = _loopback_medqa(server.url("medqa_mini.jsonl"))()

    assert resolve(bench, local) == local
    assert [s.target for s in bench.load(local)] == ["A", "B", "D"]
    assert server.requests == []
    assert not (tmp_path / "gr-cache").exists()


def test_resolve_benchmark_without_remote_files_is_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))

    class NoDownload(MedQA):
        remote_files = ()

    with pytest.raises(ConfigError, match="--data"):
        resolve(NoDownload(), None)


# ---- (5) a corrupted cached file is downloaded again ----------------------------------------


def test_corrupted_cached_file_is_redownloaded(server, tmp_path):
    cache = tmp_path / "cache"
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", PAYLOAD_SHA)
    path = fetch(rf, cache)
    assert server.requests == ["/data.jsonl"]

    corrupted = bytearray(path.read_bytes())
    corrupted[1000] ^= 0xFF  # same size, one byte flipped
    path.write_bytes(bytes(corrupted))
    assert _sha(path) != PAYLOAD_SHA

    again = fetch(rf, cache)

    assert again == path
    assert server.requests == ["/data.jsonl", "/data.jsonl"]
    assert again.read_bytes() == PAYLOAD
    assert _sha(again) == PAYLOAD_SHA
    assert sorted(p.name for p in cache.iterdir()) == ["data.jsonl"]


def test_truncated_cached_file_is_redownloaded_via_resolve(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "gr-cache"))
    bench = _loopback_medqa(server.url("medqa_mini.jsonl"))()
    root = resolve(bench, None)
    cached = root / "phrases_no_exclude_test.jsonl"
    cached.write_bytes(MEDQA_BYTES[:50])

    assert resolve(bench, None) == root
    assert cached.read_bytes() == MEDQA_BYTES
    assert len(server.requests) == 2
    assert len(bench.load(root)) == 3


def test_corrupted_cache_with_server_down_is_data_error(server, tmp_path):
    cache = tmp_path / "cache"
    rf = RemoteFile(server.url("data.jsonl"), "data.jsonl", PAYLOAD_SHA)
    path = fetch(rf, cache)
    path.write_bytes(b"garbage")
    server.stop()
    with pytest.raises(DataError, match="--data"):
        fetch(rf, cache, timeout=5)
    assert not any(p.name.startswith(".part-") for p in cache.iterdir())


# ---- bugs found: interrupted downloads ---------------------------------------------------------


def test_interrupted_chunked_download_is_data_error(server, tmp_path):
    rf = RemoteFile(
        server.url("_/chunked-truncated"), "c.bin", hashlib.sha256(b"x" * 1000).hexdigest()
    )
    cache = tmp_path / "cache"
    try:
        with pytest.raises(DataError, match="--data"):
            fetch(rf, cache, timeout=5)
    finally:
        # Whatever escapes, the temporary file is cleaned up (the finally block in fetch works).
        assert list(cache.iterdir()) == []


def test_interrupted_download_without_checksum_is_not_cached(server, tmp_path):
    rf = RemoteFile(server.url("_/truncated"), "t.bin", None)
    cache = tmp_path / "cache"
    with pytest.raises(DataError):
        fetch(rf, cache, timeout=5)
    assert not (cache / "t.bin").exists()
