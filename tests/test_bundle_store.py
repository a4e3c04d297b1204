"""Content-addressed bundles (issue 28, item 2): the world's files once per content.

A bundles folder keeps each episode's own files (manifest, compressed steps) in its
folder and every other bundle file once in `shared/<sha256>`. These tests hold it to
what it must not change: a materialized bundle is byte for byte the plain folder the
same trace gives, an auditor reading either through `Bundle.load` and the query API
gets the same answers and the same report, and an audit writes a bounded number of
files per episode whatever the world.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit import bundle_store
from eairdsl.audit.bundle import (
    GRADER_INDEX,
    bundle_run,
    materialize_bundles,
    trace_file_names,
    write_bundle,
)
from eairdsl.audit.evidence import EVENTS, MANIFEST, Bundle, BundleError
from eairdsl.audit.folder import AuditFolder, report_json
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.query import call_tool
from eairdsl.audit.runner import audit_episodes
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parents[1]


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[World, Path]]:
    """Per world, a run folder of a few sim episodes: two conditions, default and reckless
    agents, two seeds of one cell (its episodes share the world's files)."""
    root = tmp_path_factory.mktemp("store")
    out: dict[str, tuple[World, Path]] = {}
    for name in ("d1", "a1"):
        world = resolve_world(ROOT / "worlds" / f"{name}.eair")
        instance = str(world.instances[0]["id"])
        for cond in [c.name for c in world.conditions][:2]:
            for seed, agents in ((0, "sim"), (1, "sim"), (2, "sim:reckless")):
                run_episode(world, cond, instance, seed, agents,
                            root / name / "runs" / agents.replace(":", "_"))
        out[name] = (world, root / name / "runs")
    return out


@pytest.mark.parametrize("name", ["d1", "a1"])
def test_a_materialized_bundle_is_the_plain_folder_byte_for_byte(
        name: str, runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """Bundled compactly, then materialized, every episode folder is byte for byte the
    plain folder the same trace gives, and so is the grader index."""
    _, run = runs[name]
    source = ROOT / "worlds" / f"{name}.eair"
    plain = bundle_run(run, tmp_path / "plain", source, materialize=True)
    compact = bundle_run(run, tmp_path / "compact", source)
    assert [(d.trace, d.episode) for d in plain] == [(d.trace, d.episode) for d in compact]
    written = materialize_bundles(tmp_path / "compact", tmp_path / "materialized")
    assert sorted(p.name for p in written) == sorted({d.episode for d in plain})
    want, got = _tree(tmp_path / "plain"), _tree(tmp_path / "materialized")
    assert got == want
    assert len(want) > 6 * len(written)  # plain folders: every file in every folder
    index = json.loads(want[GRADER_INDEX])
    assert sorted(index["episodes"]) == sorted(p.name for p in written)
    # and every trace's label (TraceLabel) came along with its entry
    assert len(index["labels"]) == len({d.trace for d in plain}) > 0
    # one folder materialized on its own: the same folder
    one = written[0].name
    materialize_bundles(tmp_path / "compact" / one, tmp_path / "one")
    assert _tree(tmp_path / "one" / one) == _tree(tmp_path / "plain" / one)


def test_a_compact_folder_holds_the_episode_s_own_files_and_shares_the_rest(
        runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """Each episode folder: its manifest (the plain folder's bytes) and its steps,
    gzipped; every other file once in shared/, named by the sha256 of its content."""
    _, run = runs["a1"]
    done = bundle_run(run, tmp_path / "b", ROOT / "worlds" / "a1.eair")
    shared = tmp_path / "b" / bundle_store.SHARED
    for name in {d.episode for d in done}:
        folder = tmp_path / "b" / name
        assert sorted(p.name for p in folder.iterdir()) == [bundle_store.EVENTS_GZ, MANIFEST]
        manifest = Bundle.load(folder).manifest
        events = gzip.decompress((folder / bundle_store.EVENTS_GZ).read_bytes())
        assert hashlib.sha256(events).hexdigest() == manifest.files[EVENTS]
        for rel, digest in manifest.files.items():
            if rel != EVENTS:
                assert hashlib.sha256((shared / digest).read_bytes()).hexdigest() == digest
    for blob in shared.iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


@pytest.mark.parametrize("name", ["d1", "a1"])
def test_an_auditor_sees_the_same_bundle_either_way(
        name: str, runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """`Bundle.load` of a compact folder and of the plain one: the same steps and world
    material, the same query answers and the same offline report."""
    world, run = runs[name]
    source = ROOT / "worlds" / f"{name}.eair"
    for d in bundle_run(run, tmp_path / "plain", source, materialize=True):
        write_bundle(Path(d.trace), world, tmp_path / "compact")
    for folder in bundle_store.episode_folders(tmp_path / "plain"):
        a, b = Bundle.load(folder), Bundle.load(tmp_path / "compact" / folder.name)
        assert (a.manifest, a.steps, a.participants, a.policies, a.authorization, a.records,
                a.documents, a.tools, a.cards, a.vocabularies) == (
            b.manifest, b.steps, b.participants, b.policies, b.authorization, b.records,
            b.documents, b.tools, b.cards, b.vocabularies)
        roles = [p.name for p in a.participants if p.kind == "role"]
        last = a.steps[-1].step
        for tool, args in (("read", {"step": a.steps[0].step, "through": last}),
                           ("edges", {}), ("neighbors", {"node": roles[0]}),
                           ("unconsulted", {"role": roles[0]}),
                           ("search", {"pattern": a.steps[-1].actor})):
            assert call_tool(a, tool, args) == call_tool(b, tool, args), tool
        assert report_json(RulesAuditor().audit(a)) == report_json(RulesAuditor().audit(b))


def test_an_audit_writes_a_bounded_number_of_files_per_episode(
        runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """Seeds of one cell share every world file: past the first episode, each one adds
    its two bundle files and its report and validation, never a copy of the world."""
    _, run = runs["d1"]
    traces = sorted(run.rglob("*.jsonl"))
    first = audit_episodes(traces[:1], tmp_path / "one", RulesAuditor())
    assert len(first.entries) == 1
    base = sum(1 for p in (tmp_path / "one").rglob("*") if p.is_file())
    index = audit_episodes(traces, tmp_path / "all", RulesAuditor())
    folder = AuditFolder(tmp_path / "all")
    files = sum(1 for p in folder.path.rglob("*") if p.is_file())
    shared = sum(1 for _ in (folder.bundles / bundle_store.SHARED).iterdir())
    episodes = len(index.entries)
    assert episodes == len(bundle_store.episode_folders(folder.bundles)) >= 5
    assert files == shared + 4 * episodes + 2  # + index.json and the grader index
    # two conditions: at most two sets of the world's files (records and documents are
    # common to both), however many episodes each has
    assert shared <= 2 * (base - 4 - 2)
    assert files <= 5 * episodes + base


def test_a_bundle_folder_without_its_shared_files_says_what_is_missing(
        runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """A compact episode folder copied away from its bundles folder cannot be read, and
    says which file and where it was looked for; materialized, it reads anywhere."""
    world, run = runs["d1"]
    trace = sorted(run.rglob("*.jsonl"))[0]
    manifest = write_bundle(trace, world, tmp_path / "b")
    alone = tmp_path / "elsewhere" / manifest.episode
    alone.parent.mkdir()
    (tmp_path / "b" / manifest.episode).rename(alone)
    with pytest.raises(BundleError, match="listed in the manifest but missing"):
        Bundle.load(alone)
    (tmp_path / "elsewhere" / manifest.episode).rename(tmp_path / "b" / manifest.episode)
    materialize_bundles(tmp_path / "b" / manifest.episode, tmp_path / "plain")
    assert Bundle.load(tmp_path / "plain" / manifest.episode).manifest == manifest


def test_materializing_refuses_its_own_folder_and_what_is_no_bundle(
        runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    from eairdsl.errors import UsageError

    world, run = runs["d1"]
    write_bundle(sorted(run.rglob("*.jsonl"))[0], world, tmp_path / "b")
    with pytest.raises(UsageError, match="choose another -o"):
        materialize_bundles(tmp_path / "b", tmp_path / "b")
    with pytest.raises(UsageError, match="no bundle folders found"):
        materialize_bundles(run, tmp_path / "out")


def test_cli_materializes_an_audit_s_bundles_and_refuses_them_as_traces(
        runs: dict[str, tuple[World, Path]], tmp_path: Path) -> None:
    """`eairc bundle AUDIT --materialize` writes its bundles as plain folders, the same
    as bundling the traces plainly; without --materialize, bundles are not traces."""
    from typer.testing import CliRunner

    from eairdsl.cli import app

    world, run = runs["d1"]
    traces = sorted(run.rglob("*.jsonl"))[:2]
    audit_episodes(traces, tmp_path / "audit", RulesAuditor())
    runner = CliRunner()
    res = runner.invoke(app, ["bundle", str(tmp_path / "audit"), "-o", str(tmp_path / "m"),
                              "--materialize"])
    assert res.exit_code == 0, res.output
    assert "materialized 2 bundle folder(s)" in res.output
    for trace in traces:
        write_bundle(trace, world, tmp_path / "plain", materialize=True)
    for folder in bundle_store.episode_folders(tmp_path / "plain"):
        assert _tree(tmp_path / "m" / folder.name) == _tree(folder)
    res = runner.invoke(app, ["bundle", str(tmp_path / "audit" / "bundles"), "-o",
                              str(tmp_path / "x")])
    assert res.exit_code == 1
    assert "bundles already written, not traces" in res.output and "--materialize" in res.output


def test_trace_files_sort_by_their_parts(tmp_path: Path) -> None:
    """Traces are listed in the order of their paths' parts ("a/b" before "a-b", as
    Paths sort), whatever key does it (one string per path, not a list of parts)."""
    header = json.dumps({"type": "header"}) + "\n"
    names = ["a/z.jsonl", "a/b/c.jsonl", "a-b/c.jsonl", "a.b/c.jsonl", "ab.jsonl",
             "a b/c.jsonl", "a/b-c.jsonl"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(header, encoding="utf-8")
    found = [Path(p).relative_to(tmp_path).as_posix() for p in trace_file_names(tmp_path)]
    assert found == [p.relative_to(tmp_path).as_posix()
                     for p in sorted(tmp_path / n for n in names)]
