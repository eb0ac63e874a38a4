"""Open models on vLLM and SGLang: the engine's OpenAI-compatible server, started and stopped by the run.

``vllm/MODEL`` runs ``vllm serve MODEL --host H --port P`` and ``sglang/MODEL`` runs
``python -m sglang.launch_server --model-path MODEL --host H --port P``, with the parallel sizes
given as model options (``--model-opt tensor_parallel_size=4``; vLLM: tensor, pipeline and data
parallel sizes; SGLang: ``--tp``, ``--dp`` and ``--pp-size``) and anything else passed through
as typed (``--engine-arg``, repeatable, or ``--model-opt engine_args="..."``). Multi-node vLLM
runs on a Ray cluster that is already up: ``--engine-arg=--distributed-executor-backend=ray``.

The server starts at the first call, not before (a dry run starts nothing), in its own process
group, its output going to a log file. The run waits until ``GET /v1/models`` answers (at most
``ready_timeout`` seconds; a server that exits or does not get ready is an :class:`EngineError`
with its last output lines), then calls it like any OpenAI-compatible endpoint. It is stopped
when the run ends, fails or is interrupted: SIGTERM to its process group, SIGKILL after
``stop_timeout`` seconds; on Linux the server also gets SIGTERM if the harness itself dies. A
server that exits during the run ends the run with an error naming the engine and its exit code;
what was answered is stored, and the same command resumes once the cause is fixed.

The engine's version (``vllm --version``; the ``sglang`` package's version as the configured
Python sees it) is read before the run starts and becomes the endpoint identity recorded in
every request key and in the run id (``vllm 0.9.1``), so answers of two engine versions never
mix and a re-run with another port or parallel layout reuses what is stored. It is also kept with
the run and named in every result's fingerprint (:func:`engine_record`: ``"engine": {"name":
"vllm", "version": "0.9.1"}``, absent for models not served by an engine), where reports show
it and the leaderboard keeps two engine versions of one model apart. Candidate and judges with
the same engine command share one server.

Only the engine the run started is trusted with prompts. Each server gets a fresh random key
(vLLM in ``VLLM_API_KEY``, which ``ps`` does not show other users; SGLang as ``--api-key``), sent
on every call and readiness probe, so no one else can use it. Nothing may answer at its address
before it is started, and on Linux every socket listening on its port must belong to its process
group (``/proc/net/tcp*`` and ``/proc/PID/fd``), checked before each probe and once it answers:
a port taken by another local user stops the run before any prompt is sent. The engine's
environment is ours without credentials (:func:`engine_env`: no ``*_API_KEY``, ``*_TOKEN``,
``*_KEY``, ``*SECRET*`` or ``*PASSWORD*``), except Hugging Face's tokens, which gated downloads need.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from secrets import token_hex
from typing import Any, ClassVar

import aiohttp

from grandrounds.core.errors import ConfigError, GrandroundsError
from grandrounds.core.params import Param
from grandrounds.core.records import Request, Response
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.http import DEFAULT_MAX_RESPONSE_BYTES
from grandrounds.providers.openai_compat import OpenAIProvider

#: Output lines of the engine shown in an error.
TAIL_LINES = 15
#: Seconds between readiness probes.
POLL_SECONDS = 0.5


class EngineError(GrandroundsError):
    """The engine server could not be started, did not get ready, or exited during the run."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


#: Variables of ours that never reach the engine: provider keys and other credentials. Hugging
#: Face's tokens stay (the engine downloads gated weights with them).
KEPT_TOKENS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})


def engine_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an engine (and its version query) runs in: ours without any variable whose
    name ends in ``_API_KEY``, ``_TOKEN`` or ``_KEY`` or holds ``SECRET`` or ``PASSWORD`` (but
    :data:`KEPT_TOKENS`), plus ``extra``."""

    def secret(name: str) -> bool:
        upper = name.upper()
        if upper in KEPT_TOKENS:
            return False
        return (
            upper.endswith(("_API_KEY", "_TOKEN", "_KEY"))
            or "SECRET" in upper
            or "PASSWORD" in upper
        )

    env = {k: v for k, v in os.environ.items() if not secret(k)}
    return env | (extra or {})


def _listening(host: str, port: int) -> bool:
    """Whether something accepts connections at ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _listener_inodes(port: int) -> set[int] | None:
    """Linux: the inodes of the TCP sockets listening on ``port`` (any address), from
    /proc/net/tcp and tcp6; None where those cannot be read."""
    found, read_any = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st ... inode: state 0A is LISTEN, the port is hex after ":"
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                found.add(int(fields[9]))
    return found if read_any else None


def _group_sockets(pgid: int) -> set[int] | None:
    """Linux: the inodes of the sockets held open by the processes of process group ``pgid``
    (the engine and its workers); None where /proc cannot tell."""
    out: set[int] = set()
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            if (
                int(stat.rsplit(")", 1)[1].split()[2]) != pgid
            ):  # fields after the name: state ppid pgrp
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    out.add(int(target[8:-1]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def foreign_listener(port: int, pgid: int) -> bool | None:
    """Whether a process outside the engine's process group listens on ``port`` (Linux); None
    where /proc cannot tell (then the per-run key is the only check)."""
    listening = _listener_inodes(port)
    if listening is None:
        return None
    ours = _group_sockets(pgid)
    if ours is None:
        return None
    return bool(listening - ours)


def _tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    """The last ``n`` non-empty lines of the engine's log."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-n:]


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


_VERSIONS: dict[tuple[str, tuple[str, ...]], str] = {}


def engine_version(engine: str, executable: list[str], query: list[str]) -> str:
    """The engine's version as its executable reports it (asked once per process and executable)."""
    key = (engine, tuple(executable))
    if key in _VERSIONS:
        return _VERSIONS[key]
    cmd = [*executable, *query]
    try:
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            env=engine_env(),
        )
    except FileNotFoundError:
        raise ConfigError(
            f"{engine}: executable {executable[0]!r} not found: install {engine} where it can use the GPUs, "
            f"or name it with --model-opt executable=PATH"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(
            f"{engine}: could not ask {shlex.join(cmd)} for its version ({e})"
        ) from None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise ConfigError(
            f"{engine}: {shlex.join(cmd)} {_exit_text(done.returncode)} without a version: {why}"
        )
    _VERSIONS[key] = lines[-1].split()[-1]
    return _VERSIONS[key]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the engine gets SIGTERM if the harness dies without stopping it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


_LIVE: weakref.WeakSet[EngineServer] = weakref.WeakSet()


@atexit.register
def _kill_live() -> None:
    """Last resort at interpreter exit: no engine outlives the harness."""
    for server in list(_LIVE):
        server.kill_now()


class EngineServer:
    """One engine process, shared by the providers that start it with the same command."""

    def __init__(
        self,
        engine: str,
        argv: list[str],
        host: str,
        port: int,
        ready_timeout: float,
        stop_timeout: float,
        log: str,
        version: str,
        model: str,
        api_key: str = "",
        key_env: str = "",
    ) -> None:
        self.engine, self.argv, self.host, self.port = engine, argv, host, port
        #: the key the engine requires of every call, fresh for this server (``key_env``: the
        #: variable it is passed in, else it is in ``argv``)
        self.api_key, self.key_env = api_key or token_hex(32), key_env
        self.ready_timeout, self.stop_timeout, self.version, self.model = (
            ready_timeout,
            stop_timeout,
            version,
            model,
        )
        #: the arguments typed for the engine (``--engine-arg``), of which the output-affecting ones identify the model
        self.extra: list[str] = []
        self.log_path = Path(log) if log else None
        self._own_log = not log
        self.proc: asyncio.subprocess.Process | None = None
        self.users = 0
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._failures: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EngineError] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def failed(self) -> EngineError | None:
        """Why the server could not start or stopped, in this run (event loop): every later caller
        of the run gets the same error at once; a later run starts afresh."""
        return self._failures.get(asyncio.get_running_loop())

    @failed.setter
    def failed(self, err: EngineError) -> None:
        self._failures[asyncio.get_running_loop()] = err

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def name(self) -> str:
        return f"{self.engine} server for {self.model} (port {self.port})"

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if loop not in self._locks:
            self._locks[loop] = asyncio.Lock()
        return self._locks[loop]

    def output(self) -> str:
        """The engine's last output lines, for an error message."""
        if self.log_path is None:
            return ""
        self._own_log = False  # named in an error: kept for the user to read
        lines = _tail(self.log_path)
        head = f"\n  last output of {self.engine} ({self.log_path}):"
        return (
            head + "".join(f"\n    {line}" for line in lines)
            if lines
            else f"\n  no output in {self.log_path}"
        )

    async def acquire(self) -> None:
        """Start the server unless it runs, and wait until it is ready; count one more user."""
        async with self._lock():
            if self.failed is not None:
                raise self.failed
            if self.proc is None:
                try:
                    await self._start()
                except EngineError as e:
                    self.failed = e
                    raise
            elif self.proc.returncode is not None:
                raise self.exited()
            self.users += 1

    async def release(self) -> None:
        async with self._lock():
            self.users -= 1
            if self.users <= 0:
                self.users = 0
                await self.stop()

    async def _start(self) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"grandrounds-{self.engine}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        try:
            log = open(self.log_path, "ab")
        except OSError as e:
            raise ConfigError(
                f"{self.engine}: cannot write its log {self.log_path} ({e.strerror or e})"
            ) from None
        if _listening(
            self.host, self.port
        ):  # before the engine exists, nothing may answer at its address
            log.close()
            raise EngineError(
                f"{self.name()}: something already listens on {self.host}:{self.port} before the engine was started; "
                f"refusing to send prompts to a process that is not the engine (another local user may hold the port): "
                f"set --model-opt port= to a free port, or leave it at 0 for a new one"
            )
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                env=engine_env({self.key_env: self.api_key} if self.key_env else None),
            )
        except OSError as e:
            raise EngineError(
                f"{self.engine}: could not start {shlex.join(self.argv)}: {e.strerror or e}"
            ) from None
        finally:
            log.close()
        _LIVE.add(self)
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout
        probe = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(
            timeout=probe, headers={"Authorization": f"Bearer {self.api_key}"}
        ) as session:
            while True:
                if self.proc is not None and self.proc.returncode is not None:
                    raise EngineError(
                        f"{self.name()} {_exit_text(self.proc.returncode)} before it was ready{self.output()}"
                    )
                self._check_listener()
                try:
                    async with session.get(self.url + "/v1/models") as resp:
                        if resp.status == 200:
                            self._check_listener()  # the listener that answered is still only the engine's
                            break
                except (TimeoutError, aiohttp.ClientError, OSError):
                    pass
                if loop.time() >= deadline:
                    raise EngineError(
                        f"{self.name()} was not ready after {self.ready_timeout:g} s (GET {self.url}/v1/models); "
                        f"raise --model-opt ready_timeout=SECONDS if loading takes longer{self.output()}"
                    )
                await asyncio.sleep(POLL_SECONDS)
            await self._check_version(session)

    def _check_listener(self) -> None:
        """Linux: every socket listening on the engine's port must belong to the engine's process
        group (its workers included); one of another process means the port was taken by someone
        else, who would receive the prompts and write the answers."""
        if self.proc is None or foreign_listener(self.port, self.proc.pid) is not True:
            return
        raise EngineError(
            f"{self.name()}: a process outside the engine listens on port {self.port}; refusing to send prompts to it "
            f"(another local user may have taken the port): set --model-opt port= to a free port, or leave it at 0"
        )

    async def _check_version(self, session: aiohttp.ClientSession) -> None:
        """The server's own version (vLLM: /version) must be the one recorded in the run's identity."""
        try:
            async with session.get(self.url + "/version") as resp:
                body = await resp.json(content_type=None) if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError):
            return
        served = body.get("version") if isinstance(body, dict) else None
        if isinstance(served, str) and served and served != self.version:
            raise EngineError(
                f"{self.name()} reports version {served}, but {self.version} was recorded for this run "
                f"(from the executable, or --model-opt version=): point executable= at the engine that serves"
            )

    def exited(self) -> EngineError:
        """The error of a server that exited during the run (every later caller gets it too)."""
        if self.failed is not None:
            return self.failed
        code = (
            self.proc.returncode
            if self.proc is not None and self.proc.returncode is not None
            else 0
        )
        err = EngineError(
            f"{self.name()} {_exit_text(code)} during the run; the answers so far are stored: "
            f"run the same command again to resume{self.output()}"
        )
        self.failed = err
        return err

    async def has_exited(self, wait: float = 0.3) -> bool:
        """Whether the process has exited (waiting a moment for its exit to be seen)."""
        proc = self.proc
        if proc is None:
            return False
        if proc.returncode is None:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
            except TimeoutError:
                return False
        return True

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # the engine leads its own group: its workers go too
        except (ProcessLookupError, PermissionError):
            pass

    async def stop(self) -> None:
        """SIGTERM to the engine's process group, SIGKILL after ``stop_timeout`` seconds."""
        proc = self.proc
        if proc is None:
            return
        try:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), self.stop_timeout)
            except TimeoutError:
                self._signal_group(signal.SIGKILL)
                await proc.wait()
            self._signal_group(signal.SIGKILL)  # workers left behind by a leader that exited
        finally:
            self.proc = None
            _LIVE.discard(self)
            if (
                self._own_log
                and self.log_path is not None
                and proc.returncode in (0, -signal.SIGTERM, -signal.SIGKILL)
            ):
                self.log_path.unlink(missing_ok=True)  # a clean stop: nothing to show
                self.log_path = None

    def kill_now(self) -> None:
        """Synchronous SIGKILL of the whole group (interpreter exit)."""
        self._signal_group(signal.SIGKILL)


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
                "executable",
                str,
                executable,
                "the engine's command (a path, or a command line such as 'python3 -m ...')",
            ),
            Param(
                "tensor_parallel_size",
                int,
                1,
                "GPUs each replica's layers are split over",
                minimum=1,
            ),
            Param(
                "pipeline_parallel_size",
                int,
                1,
                "pipeline stages (vLLM across nodes: one per node, with the Ray backend)",
                minimum=1,
            ),
            Param("data_parallel_size", int, 1, "model replicas serving in parallel", minimum=1),
            Param(
                "engine_args",
                str,
                "",
                "further arguments passed to the engine as typed (shell quoting); --engine-arg adds to them",
            ),
            Param("host", str, "127.0.0.1", "address the server listens on"),
            Param("port", int, 0, "port the server listens on (0: a free port)", minimum=0),
            Param(
                "ready_timeout",
                float,
                1800.0,
                "seconds to wait for the server to answer GET /v1/models",
                minimum=0.1,
            ),
            Param(
                "stop_timeout",
                float,
                30.0,
                "seconds between SIGTERM and SIGKILL when stopping the server",
                minimum=0.0,
            ),
            Param(
                "log",
                str,
                "",
                "file the server's output is appended to (default: a temporary file, kept when something fails)",
            ),
            Param(
                "version", str, "", "engine version to record (default: asked of the executable)"
            ),
            Param(
                "timeout",
                float,
                600.0,
                "seconds a call may take, from sending it to the last byte of the reply (then retried)",
                minimum=0.001,
            ),
            Param(
                "max_response_mb",
                float,
                DEFAULT_MAX_RESPONSE_BYTES / 2**20,
                "largest reply accepted, in MB",
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
