"""Open models on vLLM and SGLang: the engine's OpenAI-compatible server, started and stopped by the run.

``vllm/MODEL`` runs ``vllm serve MODEL --host H --port P`` and ``sglang/MODEL`` runs
``python -m sglang.launch_server --model-path MODEL --host H --port P``, with the parallel sizes
given as model options (``--model-opt tensor_parallel_size=4``; vLLM: tensor, pipeline and data
parallel sizes; SGLang: ``--tp``, ``--dp`` and ``--pp-size``) and anything else passed through
as typed (``--engine-arg``, repeatable, or ``--model-opt engine_args="..."``). Multi-node vLLM
runs on a Ray cluster that is already up: ``--engine-arg=--distributed-executor-backend=ray``.

The engine's version (``vllm --version``; the ``sglang`` package's version as the configured
Python sees it) is read before the run starts and becomes the endpoint identity recorded in
every request key and in the run id (``vllm 0.9.1``), so answers of two engine versions never
mix and a re-run with another port or parallel layout reuses what is stored. It is also kept with
the run and named in every result's fingerprint (:func:`engine_record`: ``"engine": {"name":
"vllm", "version": "0.9.1"}``, absent for models not served by an engine), where reports show
it and the leaderboard keeps two engine versions of one model apart. Candidate and judges with
the same engine command share one server.

The server process is :mod:`grandrounds.providers.engine_server`: started at the first call,
stopped when the run ends, trusted only as the one the run started, run without our credentials.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import sys
from secrets import token_hex
from typing import Any, ClassVar

from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param
from grandrounds.core.records import Request, Response
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.engine_server import (
    EngineError,
    EngineServer,
    _free_port,
    engine_version,
)
from grandrounds.providers.http import DEFAULT_MAX_RESPONSE_BYTES
from grandrounds.providers.openai_compat import OpenAIProvider


def engine_record(provider: object) -> dict[str, dict[str, str]]:
    """``{"engine": {"name": "vllm", "version": "0.9.1"}}`` for a provider that runs an engine
    server, ``{}`` for any other: what the run record keeps and the result's fingerprint shows."""
    if isinstance(provider, EngineProvider):
        return {"engine": {"name": provider.engine, "version": provider.version}}
    return {}


#: Running or startable servers by command: providers of one command share one server.
_SERVERS: dict[tuple[Any, ...], EngineServer] = {}


#: Engine arguments that change what the model answers (vLLM's and SGLang's): the weights and their
#: precision, the context, the tokenizer and chat template, adapters, speculative decoding, the
#: parsers that shape replies, the engine's own seed and generation defaults. They are part of
#: the model's identity; arguments that only place, size, log or tune the server are not.
OUTPUT_ARGS = frozenset(
    {
        "--dtype",
        "--quantization",
        "-q",
        "--max-model-len",
        "--context-length",
        "--kv-cache-dtype",
        "--calculate-kv-scales",
        "--tokenizer",
        "--tokenizer-path",
        "--tokenizer-mode",
        "--revision",
        "--code-revision",
        "--tokenizer-revision",
        "--trust-remote-code",
        "--chat-template",
        "--chat-template-content-format",
        "--load-format",
        "--model-impl",
        "--seed",
        "--random-seed",
        "--rope-scaling",
        "--rope-theta",
        "--hf-overrides",
        "--json-model-override-args",
        "--generation-config",
        "--override-generation-config",
        "--enable-lora",
        "--lora-modules",
        "--lora-paths",
        "--max-lora-rank",
        "--speculative-config",
        "--speculative-model",
        "--num-speculative-tokens",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--mm-processor-kwargs",
        "--reasoning-parser",
        "--enable-reasoning",
        "--tool-call-parser",
        "--guided-decoding-backend",
        "--grammar-backend",
        "--logits-processor-pattern",
        "--task",
        "--config-format",
        "--served-model-path",
        "--model",
        "--model-path",
    }
)


def output_args(argv: list[str]) -> str:
    """A hash (16 hex digits) of the output-affecting (:data:`OUTPUT_ARGS`) ``--name value`` pairs
    in ``argv``, in a normal form (``--a=b`` and ``--a b`` alike, underscores as dashes, order
    ignored); "" for none."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value, i = argv[i + 1], i + 1
            name = name.replace("_", "-")
            if name in OUTPUT_ARGS:
                pairs.append((name, value))
        i += 1
    if not pairs:
        return ""
    return hashlib.sha256(json.dumps(sorted(pairs)).encode()).hexdigest()[:16]


class EngineProvider(OpenAIProvider):
    """An engine's OpenAI-compatible server, run as a subprocess for the length of the run."""

    engine: ClassVar[str]
    #: Default executable (split like a shell command line).
    default_executable: ClassVar[str]
    #: What the executable is asked for its version.
    version_query: ClassVar[list[str]]
    request_kinds = frozenset({"chat", "next_token", "loglikelihood"})
    default_concurrency = 64

    @classmethod
    def engine_options(cls, executable: str) -> tuple[Param, ...]:
        return (
            Param(
                name="executable",
                type=str,
                default=executable,
                help="the engine's command (a path, or a command line such as 'python3 -m ...')",
            ),
            Param(
                name="tensor_parallel_size",
                type=int,
                default=1,
                help="GPUs each replica's layers are split over",
                minimum=1,
            ),
            Param(
                name="pipeline_parallel_size",
                type=int,
                default=1,
                help="pipeline stages (vLLM across nodes: one per node, with the Ray backend)",
                minimum=1,
            ),
            Param(
                name="data_parallel_size",
                type=int,
                default=1,
                help="model replicas serving in parallel",
                minimum=1,
            ),
            Param(
                name="engine_args",
                type=str,
                default="",
                help="further arguments passed to the engine as typed (shell quoting); --engine-arg adds to them",
            ),
            Param(name="host", type=str, default="127.0.0.1", help="address the server listens on"),
            Param(
                name="port",
                type=int,
                default=0,
                help="port the server listens on (0: a free port)",
                minimum=0,
            ),
            Param(
                name="ready_timeout",
                type=float,
                default=1800.0,
                help="seconds to wait for the server to answer GET /v1/models",
                minimum=0.1,
            ),
            Param(
                name="stop_timeout",
                type=float,
                default=30.0,
                help="seconds between SIGTERM and SIGKILL when stopping the server",
                minimum=0.0,
            ),
            Param(
                name="log",
                type=str,
                default="",
                help="file the server's output is appended to (default: a temporary file, kept when something fails)",
            ),
            Param(
                name="version",
                type=str,
                default="",
                help="engine version to record (default: asked of the executable)",
            ),
            Param(
                name="timeout",
                type=float,
                default=600.0,
                help="seconds a call may take, from sending it to the last byte of the reply (then retried)",
                minimum=0.001,
            ),
            Param(
                name="max_response_mb",
                type=float,
                default=DEFAULT_MAX_RESPONSE_BYTES / 2**20,
                help="largest reply accepted, in MB",
                minimum=0.001,
            ),
        )

    def __init__(
        self,
        spec: ModelSpec,
        executable: str | None = None,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        data_parallel_size: int = 1,
        engine_args: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        ready_timeout: float = 1800.0,
        stop_timeout: float = 30.0,
        log: str = "",
        version: str = "",
        timeout: float = 600.0,
        max_response_mb: float = DEFAULT_MAX_RESPONSE_BYTES / 2**20,
        **options: Any,
    ) -> None:
        if spec.base_url:
            raise ConfigError(
                f"{spec.provider}/ starts its own server: drop --base-url (or use openai/{spec.model} with it for a server already running)"
            )
        try:
            exe = shlex.split(executable if executable is not None else self.default_executable)
            extra = shlex.split(engine_args)
        except ValueError as e:
            raise ConfigError(
                f"{spec.provider}: cannot split executable/engine_args as a command line ({e})"
            ) from None
        if not exe:
            raise ConfigError(f"{spec.provider}: executable is empty")
        version = version or engine_version(self.engine, exe, self.version_query)
        sizes = (tensor_parallel_size, pipeline_parallel_size, data_parallel_size)
        key = (
            self.engine,
            tuple(exe),
            spec.model,
            sizes,
            tuple(extra),
            host,
            port,
            ready_timeout,
            stop_timeout,
            log,
            version,
        )
        if any(a == "--api-key" or a.startswith("--api-key=") for a in extra):
            raise ConfigError(
                f"{spec.provider}: drop --api-key from the engine arguments: each run passes the engine a fresh key of its own"
            )
        server = _SERVERS.get(key)
        if server is None:
            port = port or _free_port(host)
            api_key = token_hex(
                32
            )  # hex: never starts with "-", which an engine's argparse would take for an option
            argv = [
                *exe,
                *self.command(spec.model, host, port, *sizes),
                *self.key_args(api_key),
                *extra,
            ]
            server = _SERVERS[key] = EngineServer(
                self.engine,
                argv,
                host,
                port,
                ready_timeout,
                stop_timeout,
                log,
                version,
                spec.model,
                api_key=api_key,
                key_env=self.key_env,
            )
            server.extra = list(extra)
        self.server = server
        #: This provider's hold on the server: started by its first call, shared by the calls in flight.
        self._hold: asyncio.Future[None] | None = None
        self._closed = False
        # The engine requires the server's own fresh key of every call (no key of the environment
        # is sent to it); it is redacted from every message like any key.
        super().__init__(
            ModelSpec(spec.provider, spec.model, server.url + "/v1"),
            timeout=timeout,
            api_key_env="GRANDROUNDS_ENGINE_API_KEY",
            max_response_mb=max_response_mb,
            **options,
        )
        self._http.headers["Authorization"] = f"Bearer {server.api_key}"
        self._http.secrets = self._secrets = (*self._http.secrets, server.api_key)

    #: The variable the engine reads its API key from ("": it takes it as ``--api-key`` only).
    key_env: ClassVar[str] = ""

    def command(self, model: str, host: str, port: int, tp: int, pp: int, dp: int) -> list[str]:
        """The engine's arguments for serving ``model`` (after the executable)."""
        raise NotImplementedError

    def key_args(self, api_key: str) -> list[str]:
        """The arguments that pass the engine its key (none where :attr:`key_env` carries it)."""
        return [] if self.key_env else ["--api-key", api_key]

    @property
    def version(self) -> str:
        return self.server.version

    def request_base_url(self) -> str:
        """The engine and its version, in place of a URL whose port changes from run to run, and the
        hash of the engine arguments that can change what the model answers (``--dtype``,
        ``--quantization``, ...): two runs that differ in one are two models, never sharing answers.
        Other arguments (ports, memory, logging, scheduling) are left out, so without output-changing
        arguments the identity is what it always was."""
        args = output_args(self.server.extra)
        return f"{self.engine} {self.server.version}" + (f" args:{args}" if args else "")

    async def _started(self) -> None:
        """The server started (at the first call or look) and checked, and still running."""
        if self._closed:  # a call still on its way when the run ended: never start the server again
            raise self.server.failed or EngineError(
                f"{self.server.name()} was stopped: the run has ended"
            )
        if self._hold is None:
            self._hold = asyncio.ensure_future(self.server.acquire())
        await asyncio.shield(self._hold)  # one start for all the calls that arrive while it loads
        proc = self.server.proc
        if proc is not None and proc.returncode is not None:
            raise self.server.exited()

    async def server_slots(self) -> tuple[int, str] | None:
        """The engine's slots, asked of the engine this run started (never of whatever holds its port before)."""
        await self._started()
        return await super().server_slots()

    async def call(self, request: Request) -> Response:
        await self._started()
        try:
            return await super().call(request)
        except ProviderError as err:
            # a dropped connection may be the server dying: wait a moment for its exit to show
            if err.retryable and await self.server.has_exited():
                raise self.server.exited() from None
            raise

    async def aclose(self) -> None:
        self._closed = True
        hold, self._hold = self._hold, None
        try:
            if hold is not None:
                if not hold.done():
                    hold.cancel()
                    await asyncio.gather(hold, return_exceptions=True)
                if not hold.cancelled() and hold.exception() is None:
                    await self.server.release()
        finally:
            await super().aclose()


class VLLMProvider(EngineProvider):
    """``vllm/MODEL``: ``vllm serve MODEL`` started for the run."""

    engine = "vllm"
    #: vLLM reads VLLM_API_KEY as it reads --api-key; a variable, unlike an argument, is not
    #: shown to other local users by ps
    key_env = "VLLM_API_KEY"
    default_executable = "vllm"
    version_query = ["--version"]
    model_options = EngineProvider.engine_options("vllm")
    example = (
        "vllm/Qwen/Qwen2.5-7B-Instruct (starts `vllm serve`; --model-opt tensor_parallel_size=N)"
    )

    def command(self, model: str, host: str, port: int, tp: int, pp: int, dp: int) -> list[str]:
        argv = ["serve", model, "--host", host, "--port", str(port)]
        for flag, n in (
            ("--tensor-parallel-size", tp),
            ("--pipeline-parallel-size", pp),
            ("--data-parallel-size", dp),
        ):
            if (
                n != 1
            ):  # left out at 1 (the default), so engine versions without the flag still start
                argv += [flag, str(n)]
        return argv


class SGLangProvider(EngineProvider):
    """``sglang/MODEL``: ``python -m sglang.launch_server --model-path MODEL`` started for the run."""

    engine = "sglang"
    default_executable = shlex.quote(sys.executable)
    version_query = ["-c", "import importlib.metadata as m; print(m.version('sglang'))"]
    model_options = EngineProvider.engine_options(shlex.quote(sys.executable))
    example = "sglang/Qwen/Qwen2.5-7B-Instruct (starts sglang.launch_server with executable=PYTHON; --model-opt tensor_parallel_size=N)"

    def command(self, model: str, host: str, port: int, tp: int, pp: int, dp: int) -> list[str]:
        argv = [
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            host,
            "--port",
            str(port),
        ]
        for flag, n in (("--tp", tp), ("--pp-size", pp), ("--dp", dp)):
            if n != 1:
                argv += [flag, str(n)]
        return argv
