"""MedAgentBench v1 (``medagentbench``): 300 clinical tasks in 10 categories, done by an agent
through a FHIR record server (Jiang et al., NEJM AI 2025; stanfordmlgroup/MedAgentBench).

The tasks are ``test_data_v2.json`` (the file the official task config runs) and the nine function
specifications ``funcs_v1.json``, both from the authors' repository at a pinned commit (``--data DIR``
reads a folder holding both). Each task is one episode of at most 8 replies (the official
``max_round``) against the record server at ``--param fhir_base`` (default
``http://localhost:8080/fhir/``, where the authors' Docker image ``jyxsu6/medagentbench`` serves it).

Action protocols (``--param actions``):

- ``text`` (the reference): the official prompt (read at run time from the pinned official
  ``__init__.py``, with the functions' JSON, the task's context and its question) and the official
  reply parsing: GET / POST / FINISH, see :mod:`grandrounds.benchmarks.agent_envs.medagentbench`;
- ``native``: the nine functions as tools (and a ``finish`` tool taking the answers), with our own
  short prompt and the same environment; not comparable with the paper's numbers.

POSTs are recorded and checked field by field, never sent. Grading
(:mod:`grandrounds.graders.medagentbench_grader`) follows the public re-implementation of the
gated official checks. The headline is the success rate over all tasks: episodes that end at the
step limit or on an invalid action count as failures; an unreachable server is an unknown.

Where the re-implementation fails a task by raising, the task fails here too: a finishing reply
holding the text "POST" on a task whose POSTs it reads (its ``extract_posts`` looks past the last
message), and record-server data its checks cannot read (a lab without a value or a date, an answer
that is not a Bundle). The latter says nothing of the agent, so the result counts those tasks beside
the headline with the success rate without them (``extra["server_data_unreadable"]``), which is
how our own reading would score the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.agent_envs.medagentbench import (
    MedAgentBenchEnvironment,
    NativeTool,
    Replies,
)
from grandrounds.benchmarks.agents import AgentBenchmark, Environment
from grandrounds.benchmarks.base import (
    Aggregate,
    RemoteFile,
    RunOptions,
    read_text,
    resolve_file,
)
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import content_hash
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample, ToolSpec
from grandrounds.core.registry import Spec
from grandrounds.graders.medagentbench_grader import UNREADABLE_DATA
from grandrounds.sources.protocols import Protocol, ours
from grandrounds.sources.upstream import UpstreamRepo, python_message_contents, python_string

#: The MedAgentBench release the tasks, functions and task module are read from.
CLINERA = UpstreamRepo(
    "medagentbench", "5amp12/ClineraMedAgent", "99260117137b09f04837a8c18d18a1107efa55ae"
)
_RAW = CLINERA.url("data/medagentbench")
TASKS = RemoteFile(
    f"{_RAW}/test_data_v2.json",
    "test_data_v2.json",
    "b6e89b2ef82f1bef27c5778a644a8a66c7b25738bbd6a48d03ab3e5182df6ca8",
)
FUNCS = RemoteFile(
    f"{_RAW}/funcs_v1.json",
    "funcs_v1.json",
    "c977266db5eca75182c0d12cac1962b33ae6b5a54b9029ceb104e1a93b4c38c1",
)
#: The official task module: the prompt (``MedAgentBench_prompt``) and the loop's reply texts (``start_sample``).
TASK_PY = CLINERA.file(
    "src/server/tasks/medagentbench/__init__.py",
    "d31253d5ea40c033d64e1b43599b4a258de55c3512aab79f66c623a488116668",
)
DEFAULT_FHIR_BASE = "http://localhost:8080/fhir/"
_ID = re.compile(r"task(10|[1-9])_\d+")
_FUNC_NAME = re.compile(r"(GET|POST) \{api_base\}/([A-Za-z]+)")

#: Our prompt for the native protocol (the official one describes text actions).
NATIVE_PROMPT = (
    "You work in an electronic health record through the FHIR functions you are given as tools. "
    "Call them as often as the task needs, one call at a time; POST functions write to the patient's chart. "
    "When you have the answers to every question and have done every requested task, call `finish` with the "
    "answers as a JSON list (an empty list where nothing is asked but an action).\n\nContext: {context}\nQuestion: {question}"
)
FINISH_TOOL = ToolSpec(
    "finish",
    "End the task: the answers to every question, as a list (empty where only an action was asked).",
    {
        "type": "object",
        "properties": {
            "answers": {
                "type": "array",
                "items": {"type": ["number", "string"]},
                "description": 'e.g. ["S6534835"] or [4.2] or []',
            }
        },
        "required": ["answers"],
    },
)

REFERENCE = Protocol(
    name="reference",
    extraction="the official reply parsing: GET / POST / FINISH(...), anything else ends the episode as an invalid action",
    aggregation="success rate over all tasks; step limit and invalid actions count as failures; checks of the public re-implementation",
    source=TASK_PY.url,
    settings={"max_round": 8},
)


class MedAgentBench(AgentBenchmark):
    """MedAgentBench v1's 300 tasks as episodes against a FHIR server; success rate, by category."""

    name = "medagentbench"
    description = (
        "MedAgentBench v1: 300 clinical tasks (10 categories) done through a FHIR record server, "
        "POSTs recorded and checked, never sent (agent; --param fhir_base=URL)"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (TASKS, FUNCS)
    action_protocols: ClassVar[tuple[str, ...]] = ("text", "native")
    default_max_steps: ClassVar[int] = 8
    protocols = {"reference": REFERENCE, "grandrounds": ours(REFERENCE)}
    parameters: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        base = str(self.param("fhir_base"))
        if not re.match(r"https?://[^/\s]+/", base) or not base.endswith("/"):
            raise ConfigError(
                f"medagentbench: --param fhir_base must be an http(s) URL ending in '/', not {base!r}"
            )
        self._funcs: list[dict[str, Any]] | None = None

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """The agents' figures, and beside them the tasks failed because the record server's data
        could not be read (the re-implementation fails them; our own reading would leave them
        unscored): their count and the success rate without them."""
        agg = super().aggregate(samples, grades, options)
        hit = [
            g
            for g in grades
            if any(
                c.get("name") == UNREADABLE_DATA
                for e in g.details.get("epochs", ())
                for c in e.get("checks", ())
            )
        ]
        if not hit:
            return agg
        apart = {id(g) for g in hit}
        kept = [g.value for g in grades if g.status == "scored" and id(g) not in apart]
        extra = dict(agg.extra)
        extra["server_data_unreadable"] = {
            "n": len(hit),
            "success_rate_without": sum(v or 0.0 for v in kept) / len(kept) if kept else None,
        }
        return replace(agg, extra=extra)

    # ---- data ---------------------------------------------------------------------------
    def load(self, root: Path) -> list[Sample]:
        if not root.is_dir():
            raise DataError(
                root,
                None,
                "medagentbench reads a folder holding test_data_v2.json and funcs_v1.json (--data DIR)",
            )
        self._funcs = read_funcs(resolve_file(root, FUNCS.filename))
        return [
            self._sample(path, i, rec)
            for path in [resolve_file(root, TASKS.filename)]
            for i, rec in enumerate(_json_array(path))
        ]

    def _sample(self, path: Path, index: int, rec: Any) -> Sample:
        where = f"record {index + 1}"
        if not isinstance(rec, dict):
            raise DataError(path, where, f"a task must be a JSON object, not {type(rec).__name__}")
        tid = rec.get("id")
        m = _ID.fullmatch(tid) if isinstance(tid, str) else None
        if m is None or not isinstance(tid, str):
            raise DataError(path, where, f"'id' must be task<1-10>_<n>, not {tid!r}")
        where = f"record {index + 1} ({tid})"
        for key in ("instruction", "context"):
            if not isinstance(rec.get(key), str):
                raise DataError(path, where, f"{key!r} must be a string")
        category = f"task{m.group(1)}"
        if category == "task1" and not (isinstance(rec.get("sol"), list) and rec["sol"]):
            raise DataError(path, where, "a task1 row needs 'sol', a non-empty list")
        if category != "task1" and not (isinstance(rec.get("eval_MRN"), str) and rec["eval_MRN"]):
            raise DataError(path, where, "'eval_MRN' must be a non-empty string")
        meta = {
            "category": category,
            "context": rec["context"],
            "instruction": rec["instruction"],
            "eval_MRN": rec.get("eval_MRN"),
            "sol": rec.get("sol"),
        }
        return Sample(
            id=tid,
            benchmark=self.name,
            messages=(Message("user", rec["instruction"]),),
            target=json.dumps(rec.get("sol")) if rec.get("sol") else None,
            metadata=meta,
        )

    # ---- episodes -----------------------------------------------------------------------
    def environment(self, sample: Sample, options: RunOptions) -> Environment:
        if self._funcs is None:
            raise ConfigError(
                "medagentbench: the tasks were not loaded (its functions come with them)"
            )
        base, meta = str(self.param("fhir_base")), sample.metadata
        native = self.param("actions") == "native"
        if native:
            prompt = NATIVE_PROMPT.format(context=meta["context"], question=meta["instruction"])
        else:  # the official prompt, filled as the official loop fills it
            prompt = official_prompt().format(
                api_base=base,
                functions=json.dumps(self._funcs),
                context=meta["context"],
                question=meta["instruction"],
            )
        tools = native_tools(self._funcs) if native else None
        return MedAgentBenchEnvironment(
            meta,
            [Message("user", prompt)],
            base,
            official_replies(),
            tools,
            float(self.param("timeout")),
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medagentbench", {})

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt": python_string(TASK_PY, "MedAgentBench_prompt").fingerprint(),
            "replies": TASK_PY.describe() | {"within": "start_sample"},
        }
        if self.param("actions") == "native":
            out["native_prompt"] = content_hash([NATIVE_PROMPT, FINISH_TOOL])[:16]
        return out


MedAgentBench.parameters = (
    Param(
        name="fhir_base",
        type=str,
        default=DEFAULT_FHIR_BASE,
        help="the FHIR server's base URL, ending in '/' (the authors' Docker image jyxsu6/medagentbench serves http://localhost:8080/fhir/)",
    ),
    Param(
        name="timeout",
        type=float,
        default=60.0,
        help="seconds a request to the FHIR server may take",
        minimum=1.0,
    ),
) + MedAgentBench.agent_parameters()


def _json_array(path: Path) -> list[Any]:
    try:
        data = json.loads(read_text(path))
    except ValueError as e:
        raise DataError(path, None, f"not valid JSON ({e})") from None
    if not isinstance(data, list):
        raise DataError(path, None, f"expected a JSON array of tasks, found {type(data).__name__}")
    return data


def read_funcs(path: Path) -> list[dict[str, Any]]:
    """``funcs_v1.json``: a list of ``{name: "GET|POST {api_base}/Resource", description, parameters}``."""
    funcs = _json_array(path)
    for i, f in enumerate(funcs):
        if not (
            isinstance(f, dict)
            and isinstance(f.get("name"), str)
            and _FUNC_NAME.fullmatch(f["name"])
            and isinstance(f.get("description"), str)
            and isinstance(f.get("parameters"), dict)
        ):
            raise DataError(
                path,
                f"function {i + 1}",
                "expected {name: 'GET|POST {api_base}/Resource', description, parameters (an object)}",
            )
    return funcs


def native_tools(funcs: list[dict[str, Any]]) -> dict[str, NativeTool]:
    """The functions as tools, named ``get_observation_labs``, ``post_service_request``, ... (the
    official names hold spaces and braces, which tool names may not), and ``finish``."""
    out: dict[str, NativeTool] = {}
    for f in funcs:
        # the reader refused any name the pattern does not match
        method, resource = _FUNC_NAME.fullmatch(f["name"]).groups()  # type: ignore[union-attr]
        snake = re.sub(r"(?<!^)([A-Z])", r"_\1", resource).lower()
        name = f"{method.lower()}_{snake}"
        label = re.search(r"\(([A-Za-z ]+)\)", f["description"])
        if sum(1 for g in funcs if g["name"] == f["name"]) > 1 and label:
            name += "_" + label.group(1).strip().lower().replace(" ", "_")
        out[name] = NativeTool(ToolSpec(name, f["description"], f["parameters"]), method, resource)
    out["finish"] = NativeTool(FINISH_TOOL, "FINISH")
    return out


def official_prompt() -> str:
    """The official prompt template (``str.format`` fields api_base, functions, context, question)."""
    return python_string(TASK_PY, "MedAgentBench_prompt").text


def official_replies() -> Replies:
    """The official loop's answers to GET, POST and a bad POST, read out of ``start_sample``."""
    texts = [t for _, t in python_message_contents(TASK_PY, within="start_sample")]

    def one(test: Any, what: str) -> Any:
        found = [t for t in texts if test(t)]
        if len(found) != 1:
            raise DataError(
                TASK_PY.url,
                None,
                f"start_sample should hold exactly one {what} message, found {len(found)}",
            )
        return found[0]

    get_ok = one(lambda t: t.fields == ("get_res['data']",), "GET response")
    get_error = one(lambda t: t.fields == ("get_res['error']",), "GET error")
    post_ok = one(
        lambda t: not t.fields and t.text.startswith("POST request accepted"), "POST accepted"
    ).text
    post_invalid = one(
        lambda t: not t.fields and t.text.startswith("Invalid POST"), "invalid POST"
    ).text
    return Replies(
        lambda data: get_ok.render({"get_res['data']": data}),
        lambda err: get_error.render({"get_res['error']": err}),
        post_ok,
        post_invalid,
    )
