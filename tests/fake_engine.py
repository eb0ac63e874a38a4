#!/usr/bin/env python3
"""A stand-in for vLLM and SGLang in tests: takes their command lines, serves the OpenAI API.

    fake_engine.py --version                                   (vllm --version)
    fake_engine.py -c "...print(m.version('sglang'))"          (the sglang version query)
    fake_engine.py serve MODEL --host H --port P [...]         (vllm serve)
    fake_engine.py -m sglang.launch_server --model-path MODEL --host H --port P [...]

Every other argument is accepted and recorded, as an engine passes them on. Arguments starting
``--fake-`` change its behaviour: ``--fake-start-delay S`` (load for S seconds before listening),
``--fake-never-ready`` (never listen), ``--fake-fail-start CODE`` (exit while loading),
``--fake-crash-after N`` (exit with ``--fake-exit-code`` on the chat request after the N-th),
``--fake-reply TEXT``, ``--fake-latency S``, ``--fake-ignore-sigterm``, ``--fake-record FILE``
(argv, pid, request and SIGTERM counts, the names of its environment variables, as JSON,
rewritten on every change; each start's pid is appended to FILE.starts). As the engines do, it
requires ``Authorization: Bearer KEY`` on ``/v1/`` paths when given a key (``--api-key KEY``, or
vLLM's ``VLLM_API_KEY``), answering 401 otherwise. SIGTERM makes it exit
with code 0 unless ignored. The version is ``$FAKE_ENGINE_VERSION`` (default 0.0.0+fake);
``--fake-served-version V`` makes ``/version`` report another one. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("FAKE_ENGINE_VERSION", "0.0.0+fake")


def log(text: str) -> None:
    print(f"INFO {time.strftime('%H:%M:%S')} {text}", flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] == ["-c"]:
        print(VERSION)
        return 0
    if argv[:1] == ["serve"] and len(argv) > 1:
        engine, model, rest = "vllm", argv[1], argv[2:]
    elif argv[:2] == ["-m", "sglang.launch_server"]:
        engine, model, rest = "sglang", None, argv[2:]
    else:
        print(f"fake_engine: unknown command line {argv!r}", file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--model-path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--fake-start-delay", type=float, default=0.0)
    p.add_argument("--fake-never-ready", action="store_true")
    p.add_argument("--fake-fail-start", type=int)
    p.add_argument("--fake-crash-after", type=int)
    p.add_argument("--fake-exit-code", type=int, default=1)
    p.add_argument("--fake-reply", default="Answer: A")
    p.add_argument("--fake-latency", type=float, default=0.0)
    p.add_argument("--fake-ignore-sigterm", action="store_true")
    p.add_argument("--fake-record")
    p.add_argument("--fake-served-version", default=VERSION)
    p.add_argument("--api-key")
    args, _unknown = p.parse_known_args(rest)
    model = model or args.model_path
    api_key = args.api_key or (os.environ.get("VLLM_API_KEY") if engine == "vllm" else None)
    state = {
        "engine": engine,
        "model": model,
        "argv": argv,
        "pid": os.getpid(),
        "chat_requests": 0,
        "ready": False,
        "env": sorted(os.environ),
        "keyed": bool(api_key),
        "refused": 0,
    }
    lock = threading.Lock()

    def record() -> None:
        if args.fake_record:
            tmp = args.fake_record + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(state, f)
            os.replace(tmp, args.fake_record)

    def on_sigterm(*_: object) -> None:
        with lock:
            state["sigterm"] = state.get("sigterm", 0) + 1
            record()
        if args.fake_ignore_sigterm:
            log("SIGTERM ignored")
            return
        log("SIGTERM: shutting down")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    if args.fake_record:
        with open(args.fake_record + ".starts", "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    record()
    log(f"{engine} {VERSION}: loading {model}")
    if args.fake_fail_start is not None:
        print("ERROR CUDA out of memory while loading the weights (fake)", flush=True)
        return args.fake_fail_start
    if args.fake_never_ready:
        while True:
            log("still loading weights")
            time.sleep(0.5)
    time.sleep(args.fake_start_delay)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self) -> bool:
            if (
                not api_key
                or not self.path.startswith("/v1/")
                or self.headers.get("Authorization") == f"Bearer {api_key}"
            ):
                return True
            with lock:
                state["refused"] += 1
                record()
            self.reply(401, {"error": {"message": "Unauthorized"}})
            return False

        def do_GET(self) -> None:
            if not self.authorized():
                return
            if self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif self.path == "/health":
                self.reply(200, {})
            elif self.path == "/version":
                self.reply(200, {"version": args.fake_served_version})
            else:
                self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(
                self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}"
            )
            if not self.authorized():
                return
            if self.path != "/v1/chat/completions":
                self.reply(404, {"error": {"message": "not found"}})
                return
            if body.get("model") != model:
                self.reply(
                    404,
                    {
                        "object": "error",
                        "message": f"The model `{body.get('model')}` does not exist.",
                    },
                )
                return
            with lock:
                state["chat_requests"] += 1
                n = state["chat_requests"]
                record()
            if args.fake_crash_after is not None and n > args.fake_crash_after:
                print(f"ERROR fake engine crash after {args.fake_crash_after} requests", flush=True)
                os._exit(args.fake_exit_code)
            time.sleep(args.fake_latency)
            text = args.fake_reply
            prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            self.reply(
                200,
                {
                    "id": f"chatcmpl-fake-{n}",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": len(text.split()),
                        "total_tokens": prompt + len(text.split()),
                    },
                },
            )

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    state["ready"] = True
    record()
    log(f"Uvicorn running on http://{args.host}:{args.port}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
