"""The engine's server process behind :mod:`grandrounds.providers.engines`: started, watched and
stopped for the run (:class:`EngineServer`), its version asked of its executable
(:func:`engine_version`), its environment without credentials (:func:`engine_env`).

The server starts at the first call, not before (a dry run starts nothing), in its own process
group, its output going to a log file. The run waits until ``GET /v1/models`` answers (at most
``ready_timeout`` seconds; a server that exits or does not get ready is an :class:`EngineError`
with its last output lines), then calls it like any OpenAI-compatible endpoint. It is stopped
when the run ends, fails or is interrupted: SIGTERM to its process group, SIGKILL after
``stop_timeout`` seconds; on Linux the server also gets SIGTERM if the harness itself dies. A
server that exits during the run ends the run with an error naming the engine and its exit code;
what was answered is stored, and the same command resumes once the cause is fixed.

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

import aiohttp

from grandrounds.core.errors import ConfigError, GrandroundsError

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
