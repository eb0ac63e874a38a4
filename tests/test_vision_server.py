"""The vision loopback server (grandrounds.testing.vision) with real requests in both wire formats and
real radiology JPEGs from VQA-RAD and SLAKE: it sees the very bytes sent, answers in each wire's
format, and catches a truncated image, a wrong media type, an image without data, a missing, swapped,
misplaced or extra image. Each bad case is sent after the same request done right, which passes."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from grandrounds.providers.anthropic import read_message
from grandrounds.testing import Fault, Reply
from grandrounds.testing.vision import Seen, VisionServer, by_image, image_file_sha256
from tests.conftest import shared_file

VQA_RAD = ("vqa-rad", "VQA_RAD Image Folder")
WIRES = ("openai", "anthropic")
Q1 = "Is there evidence of an aortic aneurysm?"
Q2 = "Which organ is abnormal in this image?"
ZH = "这张CT图像显示的主要器官是什么？请用中文回答。"


@pytest.fixture
def images() -> list[Path]:
    """Two VQA-RAD radiographs and two SLAKE images, real JPEGs."""
    return [
        shared_file(*VQA_RAD, "synpic100132.jpg"),
        shared_file(*VQA_RAD, "synpic100176.jpg"),
        shared_file("slake", "imgs", "xmlab1", "source.jpg"),
        shared_file("slake", "imgs", "xmlab102", "source.jpg"),
    ]


def image_part(wire: str, data: bytes, media: str = "image/jpeg") -> dict[str, Any]:
    b64 = base64.b64encode(data).decode("ascii")
    if wire == "openai":
        return {
            "type": "image_url",
            "image_url": {"url": f"data:{media};base64,{b64}", "detail": "auto"},
        }
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": b64}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def post(
    srv: VisionServer, wire: str, messages: list[dict[str, Any]], system: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One chat request on ``wire``, sent with urllib as a client would: (status, JSON reply, headers)."""
    if wire == "openai":
        url, headers = f"{srv.base_url}/chat/completions", {"authorization": "Bearer sk-test"}
        body: dict[str, Any] = {
            "model": "gpt-test",
            "messages": ([{"role": "system", "content": system}] if system else []) + messages,
        }
    else:
        url, headers = (
            f"{srv.anthropic_url}/v1/messages",
            {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"},
        )
        body = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": messages,
            **({"system": system} if system else {}),
        }
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"content-type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def ask(
    srv: VisionServer, wire: str, *parts: dict[str, Any]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return post(srv, wire, [{"role": "user", "content": list(parts)}])


def reply_text(wire: str, out: dict[str, Any]) -> tuple[str, str | None]:
    """The answer and finish reason as grandrounds' providers read them."""
    if wire == "openai":
        return out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]
    r = read_message(out, "k")
    return r.text, r.finish_reason


def error_message(wire: str, out: dict[str, Any]) -> str:
    if wire == "anthropic":
        assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    return out["error"]["message"]


@pytest.mark.parametrize("wire", WIRES)
def test_the_server_sees_the_real_image_and_answers_in_the_wire_format(
    wire: str, images: list[Path]
) -> None:
    path = images[0] if wire == "openai" else images[2]
    sha = image_file_sha256(path)
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    seen: list[Seen] = []

    def rule(s: Seen) -> str:
        seen.append(s)
        return by_image({sha: "Yes, a fusiform aneurysm."}, "no idea")(s)

    with VisionServer(rule, keep_bodies=True) as srv:
        status, out, _ = ask(srv, wire, image_part(wire, path.read_bytes()), text_part(Q1))
    assert status == 200
    assert reply_text(wire, out) == ("Yes, a fusiform aneurysm.", "stop")
    if wire == "anthropic":
        assert (
            out["type"] == "message"
            and out["role"] == "assistant"
            and out["stop_reason"] == "end_turn"
        )
        assert out["usage"]["input_tokens"] > 0 and out["usage"]["output_tokens"] == 4
    else:
        assert out["object"] == "chat.completion" and out["usage"]["completion_tokens"] == 4
    (s,) = seen
    assert s.wire == wire and s.texts == [Q1] and [im.sha256 for im in s.images] == [sha]
    with Image.open(path) as im:
        assert (s.images[0].width, s.images[0].height, s.images[0].mode) == (*im.size, im.mode)
    assert s.images[0].media_type == "image/jpeg" and (s.images[0].message, s.images[0].part) == (
        0,
        0,
    )
    st = srv.stats
    assert (st.requests, st.images, st.image_bytes, st.distinct_images) == (
        1,
        1,
        path.stat().st_size,
        {sha},
    )
    assert st.request_images == [[sha]] and st.wires == {wire: 1}
    assert st.problems == [] and st.mismatches == 0
    kept = json.dumps(st.bodies)
    assert (
        f"<sha256:{sha}>" in kept
        and base64.b64encode(path.read_bytes()[:300]).decode()[:100] not in kept
    )
    assert len(kept) < 2000


@pytest.mark.parametrize("wire", WIRES)
def test_chinese_text_round_trips(wire: str, images: list[Path]) -> None:
    answer = "肝脏（左叶可见低密度病灶）"
    seen: list[Seen] = []
    with VisionServer(lambda s: seen.append(s) or answer) as srv:
        status, out, headers = post(
            srv,
            wire,
            [
                {
                    "role": "user",
                    "content": [image_part(wire, images[2].read_bytes()), text_part(ZH)],
                }
            ],
            system="你是一名放射科医生。",
        )
    assert status == 200 and reply_text(wire, out) == (answer, "stop")
    assert "charset=utf-8" in headers["content-type"]
    assert seen[0].texts == ["你是一名放射科医生。", ZH]
    assert seen[0].text_places == ([(0, 0), (1, 1)] if wire == "openai" else [(-1, 0), (0, 1)])


@pytest.mark.parametrize("wire", WIRES)
def test_a_truncated_image_is_a_problem(wire: str, images: list[Path]) -> None:
    data = images[1].read_bytes()
    called: list[Seen] = []
    with VisionServer(lambda s: called.append(s) or "ok") as srv:
        assert ask(srv, wire, image_part(wire, data), text_part(Q1))[0] == 200
        assert srv.stats.problems == []
        status, out, _ = ask(srv, wire, image_part(wire, data[:-2]), text_part(Q1))
    assert status == 400 and "truncated" in error_message(wire, out)
    assert len(called) == 1, "the rule answers only the complete image"
    (p,) = srv.stats.problems
    assert (
        p.startswith(f"request 2 ({wire}): message 0 part 0: not a complete image")
        and "truncated" in p
    )
    assert srv.stats.images == 2 and srv.stats.distinct_images == {image_file_sha256(images[1])}


@pytest.mark.parametrize("wire", WIRES)
def test_a_wrong_media_type_is_a_problem(wire: str, images: list[Path]) -> None:
    data = images[0].read_bytes()
    with VisionServer(lambda s: "ok") as srv:
        assert ask(srv, wire, image_part(wire, data, "image/jpeg"), text_part(Q1))[0] == 200
        assert srv.stats.problems == []
        status, out, _ = ask(srv, wire, image_part(wire, data, "image/png"), text_part(Q1))
        assert status == 400 and "media type image/png but the data is JPEG" in error_message(
            wire, out
        )
        png = io.BytesIO()
        Image.open(images[0]).save(png, "PNG")
        assert (
            ask(srv, wire, image_part(wire, png.getvalue(), "image/png"), text_part(Q1))[0] == 200
        )
        assert (
            ask(srv, wire, image_part(wire, png.getvalue(), "image/jpeg"), text_part(Q1))[0] == 400
        )
        assert ask(srv, wire, image_part(wire, data, "image/jpg"), text_part(Q1))[0] == 400
    assert [p.split(": ", 2)[2] for p in srv.stats.problems] == [
        "media type image/png but the data is JPEG (image/jpeg)",
        "media type image/jpeg but the data is PNG (image/png)",
        "media type 'image/jpg' is not one of image/jpeg, image/png, image/gif, image/webp",
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_an_image_part_without_data_is_a_problem(wire: str, images: list[Path]) -> None:
    with VisionServer(lambda s: "ok") as srv:
        assert ask(srv, wire, image_part(wire, images[3].read_bytes()), text_part(Q2))[0] == 200
        status, out, _ = ask(srv, wire, image_part(wire, b""), text_part(Q2))
    assert (
        status == 400 and error_message(wire, out) == "message 0 part 0: an image part with no data"
    )
    assert srv.stats.problems == [
        f"request 2 ({wire}): message 0 part 0: an image part with no data"
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_a_missing_image_is_a_mismatch(wire: str, images: list[Path]) -> None:
    with VisionServer(lambda s: "ok", expected={Q1: image_file_sha256(images[0])}) as srv:
        assert ask(srv, wire, image_part(wire, images[0].read_bytes()), text_part(Q1))[0] == 200
        assert (srv.stats.mismatches, srv.stats.problems) == (0, [])
        assert ask(srv, wire, text_part(Q1))[0] == 200
    assert srv.stats.mismatches == 1
    assert srv.stats.problems == [
        f"request 2 ({wire}): {Q1!r}: missing image, expected {image_file_sha256(images[0])[:12]} in message 0"
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_a_swapped_image_is_a_mismatch(wire: str, images: list[Path]) -> None:
    a, b = images[0], images[3]
    expected = {Q1: image_file_sha256(a), Q2: image_file_sha256(b)}
    with VisionServer(lambda s: "ok", expected=expected) as srv:
        assert ask(srv, wire, image_part(wire, a.read_bytes()), text_part(Q1))[0] == 200
        assert ask(srv, wire, image_part(wire, b.read_bytes()), text_part(Q2))[0] == 200
        assert (srv.stats.mismatches, srv.stats.problems) == (0, [])
        ask(srv, wire, image_part(wire, b.read_bytes()), text_part(Q1))
        ask(srv, wire, image_part(wire, a.read_bytes()), text_part(Q2))
    assert srv.stats.mismatches == 2
    assert srv.stats.problems == [
        f"request 3 ({wire}): {Q1!r}: wrong image {expected[Q2][:12]}, expected {expected[Q1][:12]}",
        f"request 4 ({wire}): {Q2!r}: wrong image {expected[Q1][:12]}, expected {expected[Q2][:12]}",
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_an_image_in_the_wrong_message_or_after_the_text_is_a_mismatch(
    wire: str, images: list[Path]
) -> None:
    """A few-shot conversation: each example's image must sit in its own user message, before its text."""
    a, b = images[1], images[2]
    expected = {Q1: image_file_sha256(a), Q2: image_file_sha256(b)}

    def shots(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Yes."},
            {"role": "user", "content": second},
        ]

    ia, ib = image_part(wire, a.read_bytes()), image_part(wire, b.read_bytes())
    with VisionServer(lambda s: "ok", expected=expected, image_order="before") as srv:
        assert post(srv, wire, shots([ia, text_part(Q1)], [ib, text_part(Q2)]))[0] == 200
        assert (srv.stats.mismatches, srv.stats.problems) == (0, [])
        post(srv, wire, shots([ib, text_part(Q1)], [ia, text_part(Q2)]))
        post(srv, wire, shots([ia, text_part(Q1)], [text_part(Q2), ib]))
    assert srv.stats.mismatches == 3
    assert srv.stats.problems == [
        f"request 2 ({wire}): {Q1!r}: its image {expected[Q1][:12]} is in message 2, not with the question in message 0",
        f"request 2 ({wire}): {Q2!r}: its image {expected[Q2][:12]} is in message 0, not with the question in message 2",
        f"request 3 ({wire}): {Q2!r}: the image is part 1, the text part 0 (expected the image before the text)",
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_an_extra_image_or_an_unknown_question_is_a_mismatch(wire: str, images: list[Path]) -> None:
    sha = image_file_sha256(images[0])
    with VisionServer(lambda s: "ok", expected={Q1: sha}) as srv:
        assert (
            ask(
                srv,
                wire,
                image_part(wire, images[0].read_bytes()),
                text_part("Question: " + Q1 + " Answer yes or no."),
            )[0]
            == 200
        )
        assert (srv.stats.mismatches, srv.stats.problems) == (0, [])
        ask(
            srv,
            wire,
            image_part(wire, images[0].read_bytes()),
            image_part(wire, images[3].read_bytes()),
            text_part(Q1),
        )
        ask(srv, wire, image_part(wire, images[0].read_bytes()), text_part(Q2))
    extra = image_file_sha256(images[3])[:12]
    assert srv.stats.problems == [
        f"request 2 ({wire}): extra image {extra} in message 0 part 1",
        f"request 3 ({wire}): extra image {sha[:12]} in message 0 part 0",
        f"request 3 ({wire}): no expected question in the request (texts: {Q2!r})",
    ]
    assert srv.stats.mismatches == 3


@pytest.mark.parametrize("wire", WIRES)
def test_a_mismatch_can_be_refused(wire: str, images: list[Path]) -> None:
    """With reject_mismatches the client gets a 400 for a miss, as for a bad image; an expect callable works too."""

    def expect(s: Seen) -> str | None:
        return None if len(s.images) == 1 else f"{len(s.images)} images"

    with VisionServer(lambda s: "ok", expected=expect, reject_mismatches=True) as srv:
        assert ask(srv, wire, image_part(wire, images[0].read_bytes()), text_part(Q1))[0] == 200
        status, out, _ = ask(srv, wire, text_part(Q1))
    assert status == 400 and error_message(wire, out) == "0 images"
    assert (srv.stats.mismatches, srv.stats.problems) == (1, [f"request 2 ({wire}): 0 images"])


def test_malformed_image_parts_are_problems(images: list[Path]) -> None:
    """What a client gets wrong about the wire: a URL instead of data, a data URL in Anthropic's data,
    one wire's part on the other, bad base64, an image in an assistant message."""
    data = images[0].read_bytes()
    b64 = base64.b64encode(data).decode()
    cases = [
        (
            "openai",
            {"type": "image_url", "image_url": {"url": "https://example.org/x.jpg"}},
            "not a data URL",
        ),
        (
            "openai",
            {"type": "image_url", "image_url": f"data:image/jpeg;base64,{b64}"},
            "without image_url.url",
        ),
        (
            "openai",
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/jpeg;base64,{b64}", "detail": "max"},
            },
            "detail",
        ),
        (
            "openai",
            image_part("anthropic", data),
            "part type 'image' is not one the openai wire takes",
        ),
        (
            "anthropic",
            image_part("openai", data),
            "part type 'image_url' is not one the anthropic wire takes",
        ),
        (
            "anthropic",
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/jpeg",
                    "data": f"data:image/jpeg;base64,{b64}",
                },
            },
            "source.data is a data URL",
        ),
        (
            "anthropic",
            {"type": "image", "source": {"type": "url", "url": "https://example.org/x.jpg"}},
            "source type 'url', not base64",
        ),
        ("anthropic", image_part("anthropic", b"not an image at all"), "not a complete image"),
        (
            "openai",
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,@@@@"}},
            "not base64",
        ),
    ]
    with VisionServer(lambda s: "ok") as srv:
        for wire, part, _ in cases:
            assert ask(srv, wire, part, text_part(Q1))[0] == 400
        status, _, _ = post(
            srv,
            "openai",
            [
                {"role": "user", "content": Q1},
                {"role": "assistant", "content": [image_part("openai", data)]},
            ],
        )
    assert status == 400
    assert len(srv.stats.problems) == len(cases) + 1
    for (wire, _, words), problem in zip(cases, srv.stats.problems):
        assert words in problem and f"({wire})" in problem, problem
    assert "an image in a 'assistant' message" in srv.stats.problems[-1]


@pytest.mark.parametrize("wire", WIRES)
def test_faults_and_finish_reasons_come_in_the_wire_format(wire: str, images: list[Path]) -> None:
    replies = iter([Fault("429", retry_after=2), Reply(text="Liver", finish_reason="length")])
    with VisionServer(lambda s: next(replies)) as srv:
        status, out, headers = ask(
            srv, wire, image_part(wire, images[2].read_bytes()), text_part(Q2)
        )
        assert status == 429 and headers["retry-after"] == "2"
        assert out["error"]["type" if wire == "anthropic" else "message"] == (
            "rate_limit_error" if wire == "anthropic" else "injected 429"
        )
        status, out, _ = ask(srv, wire, image_part(wire, images[2].read_bytes()), text_part(Q2))
    assert status == 200 and reply_text(wire, out) == (
        "Liver",
        "length" if wire == "openai" else "max_tokens",
    )
    assert srv.stats.faults == {"429": 1} and srv.stats.problems == []


def test_requests_are_answered_concurrently(images: list[Path]) -> None:
    with VisionServer(by_image({}, "ok"), latency=0.2) as srv, ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(
                ask, srv, WIRES[k % 2], image_part(WIRES[k % 2], p.read_bytes()), text_part(Q1)
            )
            for k, p in enumerate(images)
        ]
        assert [f.result()[0] for f in futures] == [200] * 4
    assert srv.stats.max_in_flight > 1
    assert srv.stats.distinct_images == {image_file_sha256(p) for p in images}
    assert srv.stats.wires == {"openai": 2, "anthropic": 2} and srv.stats.problems == []
