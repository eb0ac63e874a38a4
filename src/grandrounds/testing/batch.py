"""A loopback server on 127.0.0.1 that speaks both batch wire formats, for tests and bench scripts.

OpenAI's Batch API: ``POST /v1/files`` (multipart, ``purpose=batch``), ``POST /v1/batches``,
``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``, ``GET /v1/files/{id}/content``.
Anthropic's Message Batches: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``,
``GET /v1/messages/batches/{id}/results``. And the live endpoints beside them,
``POST /v1/chat/completions`` and ``POST /v1/messages``, so one server stands in for a provider.

Each request line is answered by ``rule(body)`` as :class:`grandrounds.testing.LoopbackServer`
does (text, :class:`~grandrounds.testing.Reply` with a finish reason, or a
:class:`~grandrounds.testing.Fault`, which becomes an error line in a batch). How each batch
ends is the ``plan``: ``plan(n, custom_ids) -> Plan`` for the n-th batch (1-based): how many
polls it stays in progress, how it ends (completed, expired, cancelled, failed) and how many of
its requests were processed before an expiry or a cancellation; while in progress it can report
requests processed (``progress`` more per look) and, on the OpenAI wire, its last looks as
``finalizing``. The server counts what a test needs to check: every submission with its custom
ids, polls, downloads, and the headers sent. ``lost_creates`` makes the next creations create the
batch and then answer 502, as a proxy that lost the reply would; both APIs' batch lists
(``GET /v1/batches``, ``GET /v1/messages/batches``, newest first) show what was created.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from grandrounds.testing import Fault, Raw, Reply, Rule, _chat_payload

#: Fault kind -> (HTTP status, Anthropic error type).
_FAULTS = {
    "429": (429, "rate_limit_error"),
    "500": (500, "api_error"),
    "529": (529, "overloaded_error"),
    "400": (400, "invalid_request_error"),
}


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How one batch goes: ``polls`` looks in progress, then ``end`` (completed | expired |
    cancelled | failed) with the first ``processed`` requests answered (None = all)."""

    polls: int = 1
    end: str = "completed"
    processed: int | None = None
    detail: str = "injected validation failure"
    #: requests reported processed per look while in progress (the results still come at the end)
    progress: int = 0
    #: OpenAI: the last looks before the end reported as "finalizing"
    finalizing: int = 0

    def shown(self, polls: int, size: int) -> int:
        """Requests reported processed after ``polls`` looks at a batch still in progress."""
        return min(size, polls * self.progress)


@dataclass
class Submission:
    wire: str
    batch_id: str
    custom_ids: list[str]
    bodies: list[dict[str, Any]]


@dataclass(kw_only=True)
class BatchServerStats:
    submissions: list[Submission] = field(default_factory=list)
    #: custom_id -> times it was submitted in a batch
    submitted: Counter[str] = field(default_factory=Counter)
    polls: int = 0
    uploads: int = 0
    downloads: int = 0
    live: int = 0
    #: the headers of every request, lower-cased names
    headers: list[dict[str, str]] = field(default_factory=list)
    live_bodies: list[dict[str, Any]] = field(default_factory=list)
    rule_errors: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class _Batch:
    wire: str
    id: str
    custom_ids: list[str]
    bodies: list[dict[str, Any]]
    plan: Plan
    created: int
    metadata: dict[str, Any] = field(default_factory=dict)
    input_file_id: str | None = None
    polls: int = 0
    ended: bool = False
    output: str | None = None
    errors: str | None = None
    results: str | None = None
    succeeded: int = 0


def default_plan(n: int, custom_ids: list[str]) -> Plan:
    return Plan()


class BatchServer:
    """``with BatchServer(rule) as srv``: ``srv.openai_url`` (``http://127.0.0.1:PORT/v1``) and
    ``srv.anthropic_url`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, rule: Rule, plan: Callable[[int, list[str]], Plan] = default_plan) -> None:
        self.rule = rule
        self.plan = plan
        #: HTTP statuses the next batch creations answer with instead of creating (then it works again)
        self.create_faults: list[int] = []
        #: creations still to answer 502 after creating the batch (the reply lost on its way back)
        self.lost_creates = 0
        self.stats = BatchServerStats()
        self.port = 0
        self._files: dict[str, bytes] = {}
        self._batches: dict[str, _Batch] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> BatchServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("batch server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(10)

    def batch_sizes(self) -> list[int]:
        return [len(s.custom_ids) for s in self.stats.submissions]

    def finish_all(self) -> None:
        """Every batch in progress ends (as planned otherwise) at its next look."""
        with self._lock:
            for b in self._batches.values():
                if not b.ended:
                    b.plan = Plan(
                        polls=b.polls + 1,
                        end=b.plan.end,
                        processed=b.plan.processed,
                        detail=b.plan.detail,
                        progress=b.plan.progress,
                    )

    def forget_all(self) -> None:
        """Every batch is gone: looks at it and its results answer 404."""
        with self._lock:
            self._batches.clear()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=512 * 2**20, middlewares=[self._record])
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._file_content)
        app.router.add_post("/v1/batches", self._openai_create)
        app.router.add_get("/v1/batches", self._openai_list)
        app.router.add_get("/v1/messages/batches", self._anthropic_list)
        app.router.add_get("/v1/batches/{id}", self._openai_status)
        app.router.add_post("/v1/batches/{id}/cancel", self._openai_cancel)
        app.router.add_post("/v1/messages/batches", self._anthropic_create)
        app.router.add_get("/v1/messages/batches/{id}", self._anthropic_status)
        app.router.add_get("/v1/messages/batches/{id}/results", self._anthropic_results)
        app.router.add_post("/v1/chat/completions", self._live_chat)
        app.router.add_post("/v1/messages", self._live_messages)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)  # a TCP site serves on an asyncio server
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.stats.headers.append({k.lower(): v for k, v in request.headers.items()})
        return await handler(request)

    # ---- answering one request -------------------------------------------------------------
    def _answer(self, body: dict[str, Any]) -> Reply | Fault:
        try:
            out = self.rule(body)
            if isinstance(out, Raw):
                raise TypeError("the batch server sends replies, not Raw bodies")
        except (
            Exception
        ) as e:  # a broken rule is a test bug: an invalid-request error, visible in stats
            with self._lock:
                self.stats.rule_errors.append(repr(e))
            return Fault("400", body={"error": {"message": f"rule failed: {e!r}"}})
        return out if isinstance(out, (Reply, Fault)) else Reply(text=out)

    @staticmethod
    def _message(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        stop = {"stop": "end_turn", "length": "max_tokens"}.get(
            reply.finish_reason, reply.finish_reason
        )
        words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", [])) + len(
            str(body.get("system", "")).split()
        )
        return {
            "id": "msg_loopback",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "loopback"),
            "content": [{"type": "text", "text": reply.text}],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": words, "output_tokens": len(reply.text.split())},
        }

    @staticmethod
    def _openai_error(fault: Fault) -> tuple[int, dict[str, Any]]:
        status = _FAULTS.get(fault.kind, (500, "api_error"))[0]
        return status, fault.body if fault.body is not None else {
            "error": {"message": f"injected {fault.kind}", "type": "server_error"}
        }

    @staticmethod
    def _anthropic_error(fault: Fault) -> tuple[int, dict[str, Any]]:
        status, etype = _FAULTS.get(fault.kind, (500, "api_error"))
        return status, fault.body if fault.body is not None else {
            "type": "error",
            "error": {"type": etype, "message": f"injected {fault.kind}"},
        }

    # ---- live endpoints --------------------------------------------------------------------
    async def _live_body(self, request: web.Request) -> dict[str, Any]:
        """A live request's body, counted and kept."""
        body = await request.json()
        with self._lock:
            self.stats.live += 1
            self.stats.live_bodies.append(body)
        return body

    async def _live_chat(self, request: web.Request) -> web.Response:
        body = await self._live_body(request)
        out = self._answer(body)
        if isinstance(out, Fault):
            status, err = self._openai_error(out)
            return web.json_response(
                err,
                status=status,
                headers={"retry-after": f"{out.retry_after:g}"} if out.kind == "429" else None,
            )
        return web.json_response(_chat_payload(body, out.text, out.finish_reason))

    async def _live_messages(self, request: web.Request) -> web.Response:
        body = await self._live_body(request)
        out = self._answer(body)
        if isinstance(out, Fault):
            status, err = self._anthropic_error(out)
            headers = (
                {"retry-after": f"{out.retry_after:g}"} if out.kind in ("429", "529") else None
            )
            return web.json_response(err, status=status, headers=headers)
        return web.json_response(self._message(body, out))

    # ---- batches: shared bookkeeping --------------------------------------------------------
    def _create_fault(self) -> web.Response | None:
        with self._lock:
            status = self.create_faults.pop(0) if self.create_faults else None
        if status is None:
            return None
        err = {
            "type": "error",
            "error": {
                "type": "api_error" if status >= 500 else "invalid_request_error",
                "message": f"injected {status}",
            },
        }
        return web.json_response(err, status=status, headers={"retry-after": "0"})

    def _lost(self, created: dict[str, Any]) -> web.Response:
        """What the client gets for a batch just created: its object, or a 502 if the reply is lost."""
        with self._lock:
            lost = self.lost_creates > 0
            self.lost_creates -= lost
        if lost:
            return web.json_response(
                {"error": {"message": "bad gateway (injected: the batch was created)"}}, status=502
            )
        return web.json_response(created)

    def _listed(
        self,
        request: web.Request,
        wire: str,
        after_key: str,
        show: Callable[[_Batch], dict[str, Any]],
    ) -> web.Response:
        """One page of a wire's batches, newest first, after the id ``after_key`` names."""
        with self._lock:
            batches = [b for b in reversed(list(self._batches.values())) if b.wire == wire]
        after = request.query.get(after_key)
        if after:
            ids = [b.id for b in batches]
            batches = batches[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.query.get("limit", "20"))
        page = batches[:limit]
        data = [show(b) for b in page]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "has_more": len(batches) > limit,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
            }
        )

    async def _openai_list(self, request: web.Request) -> web.Response:
        return self._listed(request, "openai", "after", self._openai_object)

    async def _anthropic_list(self, request: web.Request) -> web.Response:
        return self._listed(request, "anthropic", "after_id", self._anthropic_object)

    def _new_batch(self, wire: str, custom_ids: list[str], bodies: list[dict[str, Any]]) -> _Batch:
        n = next(self._ids)
        prefix = "batch_" if wire == "openai" else "msgbatch_"
        with self._lock:
            number = len(self.stats.submissions) + 1
            batch = _Batch(
                wire=wire,
                id=f"{prefix}{n:04d}",
                custom_ids=custom_ids,
                bodies=bodies,
                plan=self.plan(number, list(custom_ids)),
                created=int(time.time()),
            )
            self._batches[batch.id] = batch
            self.stats.submissions.append(Submission(wire, batch.id, list(custom_ids), bodies))
            self.stats.submitted.update(custom_ids)
        return batch

    def _look(self, batch: _Batch) -> None:
        """One poll: the batch moves on, and ends when its plan says."""
        with self._lock:
            self.stats.polls += 1
            batch.polls += 1
            if not batch.ended and batch.polls >= batch.plan.polls:
                batch.ended = True
                self._finish(batch)

    def _processed(self, batch: _Batch) -> int:
        if batch.plan.end == "failed":
            return 0
        n = batch.plan.processed
        return len(batch.custom_ids) if n is None else min(n, len(batch.custom_ids))

    def _finish(self, batch: _Batch) -> None:
        done = self._processed(batch)
        if batch.wire == "openai":
            self._finish_openai(batch, done)
        else:
            self._finish_anthropic(batch, done)

    def _finish_openai(self, batch: _Batch, done: int) -> None:
        ok, bad = [], []
        for i, (cid, body) in enumerate(zip(batch.custom_ids, batch.bodies)):
            if i < done:
                out = self._answer(body)
                if isinstance(out, Fault):
                    status, err = self._openai_error(out)
                    bad.append(
                        {
                            "id": f"batch_req_{i}",
                            "custom_id": cid,
                            "response": {"status_code": status, "body": err},
                            "error": None,
                        }
                    )
                else:
                    payload = _chat_payload(body, out.text, out.finish_reason)
                    ok.append(
                        {
                            "id": f"batch_req_{i}",
                            "custom_id": cid,
                            "response": {"status_code": 200, "body": payload},
                            "error": None,
                        }
                    )
            elif batch.plan.end in ("expired", "cancelled"):
                code = "batch_expired" if batch.plan.end == "expired" else "batch_cancelled"
                bad.append(
                    {
                        "id": f"batch_req_{i}",
                        "custom_id": cid,
                        "response": None,
                        "error": {
                            "code": code,
                            "message": f"request not executed: the batch was {batch.plan.end}",
                        },
                    }
                )
        batch.succeeded = len(ok)
        if ok:
            batch.output = self._store_file(ok)
        if bad:
            batch.errors = self._store_file(bad)

    def _finish_anthropic(self, batch: _Batch, done: int) -> None:
        lines = []
        for i, (cid, body) in enumerate(zip(batch.custom_ids, batch.bodies)):
            if i < done:
                out = self._answer(body)
                if isinstance(out, Fault):
                    _, err = self._anthropic_error(out)
                    lines.append({"custom_id": cid, "result": {"type": "errored", "error": err}})
                else:
                    lines.append(
                        {
                            "custom_id": cid,
                            "result": {"type": "succeeded", "message": self._message(body, out)},
                        }
                    )
            elif batch.plan.end == "failed":
                err = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": batch.plan.detail},
                }
                lines.append({"custom_id": cid, "result": {"type": "errored", "error": err}})
            else:
                lines.append(
                    {
                        "custom_id": cid,
                        "result": {
                            "type": "canceled" if batch.plan.end == "cancelled" else "expired"
                        },
                    }
                )
        batch.results = "\n".join(json.dumps(x) for x in lines) + "\n"

    def _store_file(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{next(self._ids):04d}"
        self._files[file_id] = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
        return file_id

    # ---- OpenAI -------------------------------------------------------------------------------
    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("purpose") != "batch" or not hasattr(form.get("file"), "file"):
            return web.json_response(
                {"error": {"message": "purpose=batch and a file are required"}}, status=400
            )
        upload = form["file"]
        assert isinstance(upload, web.FileField)  # it has a file (checked above)
        data = upload.file.read()
        file_id = f"file-{next(self._ids):04d}"
        with self._lock:
            self._files[file_id] = data
            self.stats.uploads += 1
        return web.json_response(
            {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(data)}
        )

    async def _openai_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (fault := self._create_fault()) is not None:
            return fault
        data = self._files.get(body.get("input_file_id", ""))
        if (
            data is None
            or body.get("endpoint") != "/v1/chat/completions"
            or body.get("completion_window") != "24h"
        ):
            return web.json_response(
                {
                    "error": {
                        "message": "input_file_id, endpoint and completion_window=24h are required"
                    }
                },
                status=400,
            )
        lines = [json.loads(x) for x in data.decode().splitlines() if x.strip()]
        if any(x.get("method") != "POST" or x.get("url") != "/v1/chat/completions" for x in lines):
            return web.json_response(
                {"error": {"message": "every line must POST /v1/chat/completions"}}, status=400
            )
        if len({x["custom_id"] for x in lines}) != len(lines):
            return web.json_response({"error": {"message": "duplicate custom_id"}}, status=400)
        batch = self._new_batch(
            "openai", [x["custom_id"] for x in lines], [x["body"] for x in lines]
        )
        batch.metadata, batch.input_file_id = (
            dict(body.get("metadata") or {}),
            body["input_file_id"],
        )
        return self._lost(self._openai_object(batch, "validating"))

    def _openai_object(self, batch: _Batch, status: str | None = None) -> dict[str, Any]:
        n = len(batch.custom_ids)
        if status is None:
            finalizing = (
                batch.plan.finalizing and batch.polls >= batch.plan.polls - batch.plan.finalizing
            )
            status = (
                batch.plan.end if batch.ended else "finalizing" if finalizing else "in_progress"
            )
        done = batch.succeeded if batch.ended else batch.plan.shown(batch.polls, n)
        out: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "status": status,
            "completion_window": "24h",
            "created_at": batch.created,
            "input_file_id": batch.input_file_id,
            "metadata": batch.metadata,
            "output_file_id": batch.output,
            "error_file_id": batch.errors,
            "request_counts": {
                "total": n,
                "completed": done,
                "failed": n - batch.succeeded if batch.ended else 0,
            },
        }
        if status == "failed":
            out["errors"] = {
                "object": "list",
                "data": [{"code": "invalid_request", "message": batch.plan.detail, "line": 1}],
            }
        return out

    async def _openai_status(self, request: web.Request) -> web.Response:
        batch = self._batches.get(request.match_info["id"])
        if batch is None or batch.wire != "openai":
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        self._look(batch)
        return web.json_response(self._openai_object(batch))

    async def _openai_cancel(self, request: web.Request) -> web.Response:
        batch = self._batches.get(request.match_info["id"])
        if batch is None or batch.wire != "openai":
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        with self._lock:
            batch.plan = Plan(polls=batch.polls + 1, end="cancelled", processed=0)
        return web.json_response(self._openai_object(batch, "cancelling"))

    async def _file_content(self, request: web.Request) -> web.Response:
        data = self._files.get(request.match_info["id"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        with self._lock:
            self.stats.downloads += 1
        return web.Response(body=data, content_type="application/octet-stream")

    # ---- Anthropic ------------------------------------------------------------------------------
    async def _anthropic_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (fault := self._create_fault()) is not None:
            return fault
        reqs = body.get("requests")
        if (
            not isinstance(reqs, list)
            or not reqs
            or any(
                not isinstance(r, dict) or "custom_id" not in r or "params" not in r for r in reqs
            )
        ):
            return web.json_response(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "requests: [{custom_id, params}]",
                    },
                },
                status=400,
            )
        ids = [r["custom_id"] for r in reqs]
        if len(set(ids)) != len(ids) or any(len(i) > 64 for i in ids):
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "custom_id"},
                },
                status=400,
            )
        batch = self._new_batch("anthropic", ids, [r["params"] for r in reqs])
        return self._lost(self._anthropic_object(batch))

    def _anthropic_object(self, batch: _Batch) -> dict[str, Any]:
        n = len(batch.custom_ids)
        shown = batch.plan.shown(batch.polls, n)
        counts = {
            "processing": n - shown,
            "succeeded": shown,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        }
        if batch.ended and batch.results is not None:
            counts["succeeded"] = 0
            counts["processing"] = 0
            for line in batch.results.splitlines():
                kind = json.loads(line)["result"]["type"]
                counts[kind] = counts.get(kind, 0) + 1
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if batch.ended else "in_progress",
            "request_counts": counts,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created)),
            "results_url": f"{self.anthropic_url}/v1/messages/batches/{batch.id}/results"
            if batch.ended
            else None,
        }

    async def _anthropic_status(self, request: web.Request) -> web.Response:
        batch = self._batches.get(request.match_info["id"])
        if batch is None or batch.wire != "anthropic":
            return web.json_response(
                {"type": "error", "error": {"type": "not_found_error", "message": "no such batch"}},
                status=404,
            )
        self._look(batch)
        return web.json_response(self._anthropic_object(batch))

    async def _anthropic_results(self, request: web.Request) -> web.Response:
        batch = self._batches.get(request.match_info["id"])
        if batch is None or batch.results is None:
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": "no results yet"},
                },
                status=404,
            )
        with self._lock:
            self.stats.downloads += 1
        return web.Response(body=batch.results.encode(), content_type="application/binary")
