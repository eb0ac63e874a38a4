"""The wrong files a newcomer gives: each error is one line naming the file, saying what the file
looks like and the command that would read it; the suggested command does read it."""

from __future__ import annotations

import shlex
import shutil

from typer.testing import CliRunner

from grandrounds.benchmarks.readers.sniff import command_for, look
from grandrounds.cli.main import app
from tests.conftest import shared_file


def dry(tmp_path, *args: str) -> tuple[int, str]:
    """``grandrounds run ... --dry-run`` under our protocol (no official file needed); exit code and stderr."""
    r = CliRunner().invoke(
        app,
        [
            "run",
            *args,
            "--model",
            "scripted/x",
            "--limit",
            "3",
            "--protocol",
            "grandrounds",
            "--dry-run",
            "--store",
            str(tmp_path / "s.db"),
        ],
        env={"COLUMNS": "250"},
    )
    return r.exit_code, r.stderr


def suggested(err: str) -> list[str]:
    """The command the error suggests, as arguments after ``grandrounds``."""
    cmd = err.split("to read it, run `", 1)[1].split("`", 1)[0]
    return shlex.split(cmd)[1:]


def one_line_error(code: int, err: str) -> str:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_four_option_medbullets_without_the_option(tmp_path):
    data = shared_file("medbullets", "medbullets_op4.csv")
    line = one_line_error(*dry(tmp_path, "medbullets", "--data", str(data)))
    assert line.startswith(
        f"error: {data}, line 1: missing columns: ope; this file is CSV with columns link, question, opa, opb, opc, opd"
    )
    assert f"`grandrounds run medbullets --data {data} --param options=4`" in line
    args = suggested(line)
    code, err = dry(tmp_path, *args[1:])
    assert code == 0, err


def test_pubmedqa_without_its_labels_beside_it(tmp_path):
    ori = tmp_path / "ori_pqal.json"
    shutil.copyfile(shared_file("pubmedqa", "ori_pqal.json"), ori)
    line = one_line_error(*dry(tmp_path, "pubmedqa", "--data", str(ori)))
    labels = tmp_path / "test_ground_truth.json"
    assert line.startswith(
        f"error: {labels}: not found: the test split's labels must lie beside ori_pqal.json"
    )
    assert f"`grandrounds run pubmedqa --data {ori} --param split=all`" in line
    code, err = dry(tmp_path, "pubmedqa", "--data", str(ori), "--param", "split=all")
    assert code == 0, err
    shutil.copyfile(shared_file("pubmedqa", "test_ground_truth.json"), labels)
    code, err = dry(tmp_path, "pubmedqa", "--data", str(ori))
    assert code == 0, err


def test_healthbench_file_given_to_medeqbench(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    line = one_line_error(*dry(tmp_path, "medeqbench", "--data", str(data)))
    assert line.startswith(
        f"error: {data}, line 1: missing columns: id, question, rubrics; this file is JSON Lines whose records have keys "
    )
    assert (
        "prompt_id" in line
        and "not the CSV this benchmark reads (columns id, question, rubrics)" in line
    )
    assert line.endswith(f"to read it, run `grandrounds run healthbench --data {data}`")


def test_workbook_given_to_a_json_lines_benchmark(tmp_path):
    gaps = shared_file("gaps", "GAPS-NSCLC-preview.xlsx")
    line = one_line_error(*dry(tmp_path, "medqa", "--data", str(gaps)))
    assert line.startswith(
        f"error: {gaps}: cannot be read as text: this file is an Excel workbook (first row: index, question, "
    )
    assert line.endswith(f"to read it, run `grandrounds run gaps --data {gaps}`")
    meds = shared_file("medicationqa", "MedInfo2019-QA-Medications.xlsx")
    line = one_line_error(*dry(tmp_path, "healthbench", "--data", str(meds)))
    assert line.endswith(f"to read it, run `grandrounds run medicationqa --data {meds}`")


def test_look_of_each_real_file_and_names_shown_safely(tmp_path):
    assert command_for(shared_file("medbullets", "medbullets_op5.csv")).endswith(
        "medbullets_op5.csv"
    )
    assert command_for(shared_file("medqa", "phrases_no_exclude_test.jsonl")).startswith(
        "grandrounds run medqa --data "
    )
    assert command_for(shared_file("medeqbench", "med_eq.csv")).startswith(
        "grandrounds run medeqbench --data "
    )
    odd = tmp_path / "odd.csv"
    odd.write_text("a\x1b[31m,b\n1,2\n", encoding="utf-8")
    seen = look(odd)
    assert seen.kind == "csv" and command_for(odd) is None
    assert "\x1b" not in seen.describe() and "a\\x1b[31m" in seen.describe()
