"""``grandrounds fetch`` and ``grandrounds bundle``: a machine made ready to run before it loses the network.

``fetch`` fills the download cache with each benchmark's public data and the official upstream
files its reference protocol reads; ``bundle`` writes the same files (or local data files given
with ``--data``) to a folder with a ``manifest.json`` of their checksums, to carry to a machine with
no network and run there with ``GRANDROUNDS_BUNDLE=DIR`` (or ``run --bundle DIR``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import typer

from grandrounds import __version__
from grandrounds.cli.common import console, err_console, user_errors
from grandrounds.core.errors import ConfigError, GrandroundsError
from grandrounds.core.files import inner_dir, output_dir, staged, write_text
from grandrounds.core.hashing import file_sha256
from grandrounds.core.registry import BENCHMARKS, GRADERS
from grandrounds.sources import downloads, mirrors, upstream
from grandrounds.sources.downloads import RemoteFile
from grandrounds.sources.upstream import TextRef, UpstreamFile, UpstreamText

MirrorOpt = typer.Option(
    None,
    "--mirror",
    help=f"base URL of a mirror laid out as <mirror>/<host>/<path> (else ${mirrors.MIRROR_ENV})",
)
GithubMirrorOpt = typer.Option(
    None,
    "--github-mirror",
    help=f"replaces {mirrors.GITHUB_RAW} in every URL (else ${mirrors.GITHUB_MIRROR_ENV})",
)
HfEndpointOpt = typer.Option(
    None, "--hf-endpoint", help=f"replaces {mirrors.HUGGING_FACE} (else ${mirrors.HF_ENDPOINT_ENV})"
)
BundleOpt = typer.Option(
    None,
    "--bundle",
    help=f"read data and official files from this bundle, downloading nothing (else ${mirrors.BUNDLE_ENV})",
)


def use_sources(
    mirror: str | None = None,
    github_mirror: str | None = None,
    hf_endpoint: str | None = None,
    bundle: Path | None = None,
) -> None:
    """Use this command's mirror and bundle options over the environment's (for this command only:
    the options of an earlier command run in the same process are dropped)."""
    values: dict[str, str] = {}
    for env, value in (
        (mirrors.MIRROR_ENV, mirror),
        (mirrors.GITHUB_MIRROR_ENV, github_mirror),
        (mirrors.HF_ENDPOINT_ENV, hf_endpoint),
    ):
        if value:
            if not value.startswith(("http://", "https://")):
                raise ConfigError(f"mirror {value!r}: expected an http:// or https:// base URL")
            values[env] = value
    if bundle is not None:
        if not (bundle / mirrors.MANIFEST).is_file():
            raise ConfigError(
                f"--bundle {bundle}: no {mirrors.MANIFEST} there; write one with `grandrounds bundle --out {bundle} BENCHMARK`"
            )
        values[mirrors.BUNDLE_ENV] = str(bundle)
    mirrors.set_overrides(values)


# ---- what a benchmark needs ---------------------------------------------------------------------


def _add_upstream(found: dict[UpstreamFile, None], value: Any, depth: int = 0) -> None:
    if isinstance(value, UpstreamFile):
        found[value] = None
    elif isinstance(value, (TextRef, UpstreamText)):
        found[value.source] = None
    elif depth < 2 and isinstance(value, (tuple, list, frozenset, set)):
        for v in value:
            _add_upstream(found, v, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for v in value.values():
            _add_upstream(found, v, depth + 1)


def _module_files(found: dict[UpstreamFile, None], module: ModuleType | None) -> None:
    """The upstream files a module names at its top level, and those of the ``sources`` modules it
    imports or takes names (functions, classes, presets) from."""
    if module is None:
        return
    for value in list(vars(module).values()):
        _add_upstream(found, value)
    for name in sorted(_sources_imported(module)):
        inner = importlib.import_module(name)
        for value in list(vars(inner).values()):
            _add_upstream(found, value)


def _sources_imported(module: ModuleType) -> set[str]:
    """The ``grandrounds.sources`` modules ``module`` imports (anywhere in its file), read with ``ast``."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return set()
    names: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {
        n
        for n in names
        if n.startswith("grandrounds.sources.")
        and n.count(".") == 2
        and importlib.util.find_spec(n) is not None
    }


def upstream_files_of(bench: Any) -> list[UpstreamFile]:
    """The official files ``bench``'s reference protocol reads: those it lists itself (``upstream_files``),
    its presets' system messages, and those named by its module and its grader's (with the protocol
    modules they import). A file named but not read is fetched too: a few kilobytes spent for a run
    that never stops on a missing one."""
    from grandrounds.benchmarks.base import RunOptions

    found: dict[UpstreamFile, None] = {}
    _add_upstream(found, tuple(bench.upstream_files()))
    for preset in bench.protocols.values():
        _add_upstream(found, (preset.answer.system, preset.judge.system))
    _module_files(found, sys.modules.get(type(bench).__module__))
    try:
        spec = bench.grader_spec(RunOptions(protocol="reference"))
        _module_files(found, sys.modules.get(GRADERS.get(spec.name).__module__))
    except GrandroundsError:
        pass  # a benchmark whose grader needs options given at run time: its own files are listed above
    return sorted(found, key=lambda f: (f.folder, f.path))


def data_files_of(bench: Any) -> list[RemoteFile]:
    """Every public data file of ``bench``: its default variant's and every variant its class lists."""
    seen: dict[str, RemoteFile] = {}
    for rf in (*bench.remote_files, *type(bench).remote_files):
        seen.setdefault(rf.filename, rf)
    return list(seen.values())


def benchmarks_named(names: list[str], every: bool) -> list[str]:
    if every and names:
        raise ConfigError("name benchmarks or pass --all, not both")
    if not every and not names:
        raise ConfigError("name at least one benchmark (see `grandrounds list`), or pass --all")
    return BENCHMARKS.names() if every else names


# ---- fetching -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Item:
    """One file made ready: whose, which, where it is now, and where it came from."""

    benchmark: str
    kind: str  # data | official
    name: str
    path: Path | None = None
    source: str = ""
    status: str = ""  # fetched | cached | local | failed: <why> | skipped: <why>
    #: Where an official file goes in a bundle (``reference/<folder>/<path>``).
    bundle_rel: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("fetched", "cached", "local")


def _cached(rf: RemoteFile, dest: Path) -> bool:
    if not dest.is_file():
        return False
    if rf.sha256 is not None:
        return file_sha256(dest) == rf.sha256
    record = downloads.recorded(dest)
    return record is None or record.get("url") == rf.url


def fetch_data(bench: Any) -> list[Item]:
    """``bench``'s public data in the cache (downloading what is missing), one item per file."""
    if bench.default_path() is not None:
        return [
            Item(
                benchmark=bench.name,
                kind="data",
                name="(packaged with grandrounds)",
                path=Path(bench.default_path()),
                source="package",
                status="local",
            )
        ]
    files = data_files_of(bench)
    if not files:
        return [
            Item(
                benchmark=bench.name,
                kind="data",
                name="-",
                status="skipped: no public download; pass --data PATH when running",
            )
        ]
    out = []
    root = downloads.cache_dir() / bench.name
    for rf in files:
        item = Item(
            benchmark=bench.name, kind="data", name=rf.filename, source=mirrors.mirrored(rf.url)
        )
        try:
            before = _cached(rf, root / rf.filename)
            item.path = downloads.fetch(rf, root)
            item.status = "cached" if before else "fetched"
        except GrandroundsError as e:
            item.status = f"failed: {e}"
        out.append(item)
    return out


def fetch_official(bench: Any) -> list[Item]:
    """The official files of ``bench``'s reference protocol, verified (from the reference folder, the
    cache, or downloaded into it)."""
    out = []
    for f in upstream_files_of(bench):
        item = Item(
            benchmark=bench.name,
            kind="official",
            name=f"{f.folder}/{f.path}",
            source=mirrors.mirrored(f.url),
            bundle_rel=upstream.bundle_path(f),
        )
        local = upstream.reference_root()
        cached = downloads.cache_dir() / upstream.bundle_path(f)
        try:
            if local is not None and (local / f.folder / f.path).is_file():
                item.source, item.status = str(local / f.folder / f.path), "local"
            else:
                item.status = (
                    "cached"
                    if cached.is_file() and (f.sha256 is None or file_sha256(cached) == f.sha256)
                    else "fetched"
                )
            item.path = upstream.local_path(f)
        except GrandroundsError as e:
            item.status = f"failed: {e}"
        out.append(item)
    return out


def _print_items(items: Iterable[Item], title: str) -> None:
    for it in items:
        if it.ok and it.path is not None and it.path.is_file():
            size = it.path.stat().st_size
            console.print(
                f"{it.benchmark} {it.kind} {it.name}: {it.status}, {size:,} bytes, "
                f"sha256 {file_sha256(it.path)}, from {it.source}",
                soft_wrap=True,
                highlight=False,
            )
        else:
            console.print(
                f"{it.benchmark} {it.kind} {it.name}: {it.status}", soft_wrap=True, highlight=False
            )
    err_console.print(title, style="dim")


def _bench(name: str) -> Any:
    return BENCHMARKS.get(name)()


def fetch_command(
    benchmarks: list[str] = typer.Argument(None, help="benchmark names (see `grandrounds list`)"),
    every: bool = typer.Option(False, "--all", help="every registered benchmark"),
    mirror: str | None = MirrorOpt,
    github_mirror: str | None = GithubMirrorOpt,
    hf_endpoint: str | None = HfEndpointOpt,
) -> None:
    """Fill the download cache ahead of time: each benchmark's public data and the official files its
    reference protocol reads, each checked against its pinned sha256; says what was fetched, from where."""
    with user_errors():
        use_sources(mirror, github_mirror, hf_endpoint)
        names = benchmarks_named(list(benchmarks or []), every)
        items: list[Item] = []
        for name in names:
            bench = _bench(name)
            items += fetch_data(bench) + fetch_official(bench)
    _print_items(items, f"cache: {downloads.cache_dir()}")
    if any(it.status.startswith("failed") for it in items):
        err_console.print(
            f"some files could not be fetched; {mirrors.WAYS_OUT}", soft_wrap=True, style="red"
        )
        raise typer.Exit(1)


# ---- bundles ------------------------------------------------------------------------------------


def _copy(src: Path, out: Path, rel: str, source: str, files: dict[str, Any]) -> None:
    """``src`` copied to ``out/rel`` and listed in ``files``, written as ``--out`` writes (through an
    exclusive temporary name, renamed into place; never through a link planted in ``out``)."""
    dest = inner_dir(out, Path(rel).parent) / Path(rel).name
    with staged() as written, written.open(dest, "wb") as f, src.open("rb") as r:
        shutil.copyfileobj(r, f)
    files[rel] = {"sha256": file_sha256(dest), "bytes": dest.stat().st_size, "source": source}


def _bundle_local(name: str, given: Path, out: Path, manifest: dict[str, Any]) -> Item:
    """A local data file (or folder) given with ``--data NAME=PATH``, copied into the bundle."""
    if not given.exists():
        return Item(
            benchmark=name,
            kind="data",
            name=str(given),
            status=f"failed: {given}: file or directory not found",
        )
    base = f"data/{name}/local/{given.name}"
    sources = [given] if given.is_file() else sorted(p for p in given.rglob("*") if p.is_file())
    for src in sources:
        rel = base if given.is_file() else f"{base}/{src.relative_to(given).as_posix()}"
        # recorded relative to what was given: a bundle says nothing of the maker's file system
        where = (
            given.name if given.is_file() else f"{given.name}/{src.relative_to(given).as_posix()}"
        )
        _copy(src, out, rel, f"local file {where}", manifest["files"])
    kind = "file" if given.is_file() else "folder"
    manifest["data"][name] = {"path": base, "source": f"local {kind} {given.name}", "kind": kind}
    return Item(
        benchmark=name,
        kind="data",
        name=given.name,
        path=out / base,
        source=str(given),
        status="local",
    )


def bundle_one(
    name: str, out: Path, local: dict[str, Path], manifest: dict[str, Any]
) -> list[Item]:
    """Everything ``name`` needs, copied into the bundle ``out`` and listed in ``manifest``."""
    bench = _bench(name)
    if name in local:
        data = [_bundle_local(name, local[name], out, manifest)]
    else:
        data = fetch_data(bench)
        if any(it.ok and it.source != "package" for it in data):
            manifest["data"][name] = {"path": f"data/{name}", "source": "public download"}
        for it in data:
            if it.ok and it.path is not None and it.source != "package":
                _copy(it.path, out, f"data/{name}/{it.name}", it.source, manifest["files"])
    official = fetch_official(bench)
    for it in official:
        if it.ok and it.path is not None:
            # a reference folder's file is recorded by its name there, never by a local path
            source = it.source if it.status != "local" else f"reference folder {it.name}"
            _copy(it.path, out, it.bundle_rel, source, manifest["files"])
    return data + official


def _parse_local(values: list[str]) -> dict[str, Path]:
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--data {v!r}: expected BENCHMARK=PATH")
        BENCHMARKS.get(name)  # an unknown name is an error naming the closest ones
        out[name] = Path(path)
    return out


def _load_manifest(out: Path) -> dict[str, Any]:
    """The manifest already in ``out`` (a bundle is added to, never emptied), or a new one."""
    path = out / mirrors.MANIFEST
    if path.is_symlink():
        raise ConfigError(f"{path} is a symbolic link: refusing to read or replace it")
    if not path.exists():
        return {"format": 1, "benchmarks": [], "data": {}, "files": {}}
    data = mirrors.read_manifest(path, "move it away or choose another --out")
    data.setdefault("data", {})
    data.setdefault("benchmarks", [])
    return data


def bundle_command(
    benchmarks: list[str] = typer.Argument(None, help="benchmark names (see `grandrounds list`)"),
    out: Path = typer.Option(
        ..., "--out", help="the bundle folder (created; an existing bundle is added to)"
    ),
    every: bool = typer.Option(False, "--all", help="every registered benchmark"),
    data: list[str] = typer.Option(
        [],
        "--data",
        help="BENCHMARK=PATH: bundle this local file or folder as the benchmark's data",
    ),
    mirror: str | None = MirrorOpt,
    github_mirror: str | None = GithubMirrorOpt,
    hf_endpoint: str | None = HfEndpointOpt,
) -> None:
    """Write everything the benchmarks need (data, official files, manifest.json with their sha256) to
    OUT, to carry to a machine with no network and run there with GRANDROUNDS_BUNDLE=OUT or --bundle OUT."""
    with user_errors():
        use_sources(mirror, github_mirror, hf_endpoint)
        names = benchmarks_named(list(benchmarks or []), every)
        local = _parse_local(data)
        output_dir(out)
        manifest = _load_manifest(out)
        items: list[Item] = []
        for name in names:
            items += bundle_one(name, out, local, manifest)
        manifest["benchmarks"] = sorted(set(manifest["benchmarks"]) | set(names))
        manifest["grandrounds"] = __version__
        manifest["written_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        write_text(out / mirrors.MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _print_items(
        items,
        f"bundle: {out} ({len(manifest['files'])} files); run there with {mirrors.BUNDLE_ENV}={out} or --bundle {out}",
    )
    named = set(benchmarks or [])
    if any(
        it.status.startswith("failed")
        or (it.status.startswith("skipped") and it.benchmark in named)
        for it in items
    ):
        err_console.print(
            f"the bundle lacks some files (see above); {mirrors.WAYS_OUT}",
            soft_wrap=True,
            style="red",
        )
        raise typer.Exit(1)


def register(app: typer.Typer, store_path: Any, StoreOpt: Any) -> None:
    """Add ``fetch`` and ``bundle`` to ``app``."""
    app.command("fetch")(fetch_command)
    app.command("bundle")(bundle_command)
