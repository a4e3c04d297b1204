"""Pass 6: load the data next to the world — record rows, instances, documents.

Data files are JSON (a list of objects) or CSV. Every row is validated against
the declared fields here, at compile time, so a typo in a data file is a
located error instead of a `None` that makes a measurement pass vacuously.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from eairdsl.check import types as T
from eairdsl.check.loader import LoadedModule, overlay_bytes, resolve_data_path
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import MAX_DATA_BYTES, SourceError, Span, read_bounded
from eairdsl.syntax import ast as A

__all__ = ["load_data", "read_rows", "data_ref", "read_world_file"]


#: How deeply the values of a JSON data file may nest (rows are level 2).
MAX_DATA_DEPTH = 32


def _mb(size: int) -> str:
    """A size as a limit is stated: whole megabytes, else bytes."""
    whole, rest = divmod(size, 1024 * 1024)
    return f"{whole} MB" if whole and not rest else f"{size:,} bytes"


def read_world_file(world: CheckedWorld, path: Path, span: Span, diagnostics: Diagnostics,
                    what: str = "data file", limit: int = MAX_DATA_BYTES) -> bytes | None:
    """The bytes of a file a world names (a data file, document or card), counted against
    the world's data budget, or None with the diagnostic located at `span`.

    The budget counts a file each time a declaration names it (what the check holds and
    parses); the declaration that would cross it is E209, reported once, and no later file
    that does not fit is read. Nothing past the budget is read: the file's size is looked
    at first (`read_bounded`)."""
    remaining = max(world.limits.data_bytes - world.data_loaded, 0)
    overlaid = overlay_bytes(path)  # an editor's unsaved buffer of this file
    if overlaid is not None and len(overlaid) <= min(limit, remaining):
        world.data_loaded += len(overlaid)
        return overlaid
    try:
        data = read_bounded(path, min(limit, remaining), what)
    except SourceError as err:
        if err.code == "E209" and (err.size is None or err.size <= limit) and remaining < limit:
            if not world.data_budget_spent:
                world.data_budget_spent = True
                total = world.data_loaded + (err.size or remaining + 1)
                diagnostics.error(
                    "E209", f"the world's data files together exceed its data budget of "
                    f"{_mb(world.limits.data_bytes)}: {path.name} would bring them to "
                    f"{total:,} bytes", span,
                    "a world loads at most this much of data files, documents and cards "
                    "together, counting a file each time it is named: name a large file "
                    "once, or make it smaller")
            return None
        if err.code == "E201":
            diagnostics.error("E206", f"{what} not found: {path.name}", span,
                              f"expected it at {path}")
        elif err.code == "E209":
            diagnostics.error("E209", f"{what} {path.name} is too large "
                              f"(the limit is {_mb(limit)})", span, err.hint)
        else:  # a directory, a pipe or device, a name too long, no permission
            diagnostics.error(err.code, err.message, span, err.hint)
        return None
    world.data_loaded += len(data)
    return data


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a world can use")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]} is too large a number")
    return value


def _too_deep(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (list, dict)))
        elif isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (list, dict)))
    return False


def read_rows(path: Path, data: bytes, span: Span,
              diagnostics: Diagnostics) -> list[dict[str, Any]] | None:
    """Rows of a JSON list-of-objects or CSV file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        diagnostics.error("E102", f"{path.name} is not valid UTF-8", span,
                          "re-save the data file as UTF-8")
        return None
    if path.suffix == ".csv":
        try:
            return [dict(row) for row in csv.DictReader(io.StringIO(text))]
        except csv.Error as exc:
            diagnostics.error("E207", f"{path.name}: unreadable CSV ({exc})", span,
                              "CSV files have a header row and one record per line")
            return None
    hint = "data files are JSON lists of objects, or CSV"
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        diagnostics.error("E207", f"{path.name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}",
                          span, hint)
        return None
    except RecursionError:
        diagnostics.error("E207", f"{path.name}: JSON nested too deeply", span,
                          f"data values nest at most {MAX_DATA_DEPTH} levels")
        return None
    except ValueError as exc:  # NaN, Infinity, 1e999, an integer over 4300 digits
        diagnostics.error("E207", f"{path.name}: unreadable JSON ({str(exc)[:80]})", span, hint)
        return None
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        diagnostics.error("E207", f"{path.name} must hold a JSON list of objects", span)
        return None
    if _too_deep(value, MAX_DATA_DEPTH):
        diagnostics.error("E207", f"{path.name}: JSON nested too deeply", span,
                          f"data values nest at most {MAX_DATA_DEPTH} levels")
        return None
    return value


def _conforms(value: Any, t: T.Type) -> bool:
    """Does a cell fit its field's type? The runtime's answer (`eairdsl.runtime.conform`),
    without enum membership, schema shapes and text length, which `_validate` reports in
    its own words."""
    from eairdsl.runtime.conform import misfit

    problem = misfit(value, _type_ir(t))
    return problem is None or problem.kind != "type"


def _type_ir(t: T.Type) -> Any:
    """A checker type as the IR's TypeIR (memoised: data files have many cells)."""
    hit = _TYPE_IR.get((t, t.max))
    if hit is None:
        from eairdsl.ir import TypeIR

        hit = TypeIR(kind=t.kind, name=t.name, arg=_type_ir(t.arg) if t.arg else None,
                     max=t.max)
        _TYPE_IR[(t, t.max)] = hit
    return hit


_TYPE_IR: dict[tuple[T.Type, int | None], Any] = {}


def _coerce_csv(rows: list[dict[str, Any]], fields: dict[str, T.Type]) -> None:
    """CSV cells are text; read them as the declared types (empty cells are absent)."""
    for row in rows:
        for name, value in list(row.items()):
            t = fields.get(name)
            if not isinstance(value, str) or t is None:
                continue
            if value == "":
                row[name] = None
            elif t.kind == "bool" and value.lower() in ("true", "false"):
                row[name] = value.lower() == "true"
            elif t.kind in ("int", "number", "money", "duration", "percent"):
                try:
                    number = float(value.lstrip("$").rstrip("%"))
                except ValueError:
                    continue
                row[name] = int(number) if number.is_integer() and t.kind != "number" \
                    else number


#: Row problems listed per data file; the rest are counted in one last diagnostic.
MAX_ROW_ERRORS = 50


def _validate(rows: list[dict[str, Any]], fields: dict[str, T.Type], what: str, file: str,
              span: Span, world: CheckedWorld, outer: Diagnostics,
              optional: frozenset[str] = frozenset()) -> None:
    diagnostics = Diagnostics()
    for index, row in enumerate(rows, start=1):
        if len(diagnostics) >= MAX_ROW_ERRORS:
            bad = sum(1 for row in rows[index - 1:] if _row_has_problem(row, fields, optional))
            diagnostics.error("E208", f"{file}: problems listed up to row {index - 1}; "
                              f"at least {bad} later row(s) do not match {what} either"
                              if bad else f"{file}: problems listed up to row {index - 1}; "
                              "later rows are not checked further", span,
                              "fix the rows listed first, then check again")
            break
        for name in row:
            if name is None:
                diagnostics.error("E208", f"{file} row {index}: more cells than columns", span,
                                  "check the row's commas and quoting")
            elif name not in fields:
                diagnostics.error("E208", f"{file} row {index}: field '{name}' is not declared "
                                  f"in {what}", span, did_you_mean(name, fields))
        for name, t in fields.items():
            if name not in row and name in optional:
                continue
            if name not in row:
                diagnostics.error("E208", f"{file} row {index}: missing field '{name}'", span,
                                  f"every row of {what} needs it")
                continue
            value = row[name]
            if not _conforms(value, t):
                diagnostics.error("E208", f"{file} row {index}: field '{name}' should be {t}, "
                                  f"got {json.dumps(value)[:40]}", span)
            elif t.kind == "enum" and t.name in world.enums and isinstance(value, str):
                members = world.enums[t.name].members
                if value not in members:
                    diagnostics.error("E208", f"{file} row {index}: '{value}' is not a value of "
                                      f"enum {t.name}", span, did_you_mean(value, members))
            elif t.kind == "text" and t.max is not None and isinstance(value, str) \
                    and len(value) > t.max:
                diagnostics.error("E208", f"{file} row {index}: field '{name}' is longer than "
                                  f"{t.max} characters", span)
    outer.extend(diagnostics)


def _row_has_problem(row: dict[str, Any], fields: dict[str, T.Type],
                     optional: frozenset[str]) -> bool:
    """A cheap version of `_validate`'s tests, for counting rows past the listed ones."""
    if any(name is None or name not in fields for name in row):
        return True
    return any((name not in row and name not in optional)
               or (name in row and not _conforms(row[name], t)) for name, t in fields.items())


def _hashable(value: Any) -> Any:
    """A key value as a dict key: lists and objects (bad keys, reported elsewhere) as JSON."""
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _base(module: LoadedModule) -> Path:
    return module.path.parent


def data_ref(module: LoadedModule, written: str) -> str:
    """A data file's machine-independent name: relative to the world's folder (or stdlib/)."""
    parent = module.ref.rsplit("/", 1)[0] if "/" in module.ref else ""
    return f"{parent}/{written}" if parent else written


def _load_table(world: CheckedWorld, module: LoadedModule, source: str, span: Span,
                fields: list[A.FieldDecl], types: dict[str, T.Type], what: str,
                diagnostics: Diagnostics) -> tuple[Path, list[dict[str, Any]]] | None:
    """Read, type and validate one data file of declared fields; None if unusable."""
    path = resolve_data_path(_base(module), source, span, diagnostics)
    data = read_world_file(world, path, span, diagnostics) if path else None
    if path is None or data is None:
        return None
    world.data_files[data_ref(module, source)] = data
    rows = read_rows(path, data, span, diagnostics)
    if rows is None:
        return None
    if path.suffix == ".csv":
        _coerce_csv(rows, types)
    optional = frozenset(f.name for f in fields if f.default is not None)
    _validate(rows, types, what, path.name, span, world, diagnostics, optional)
    return path, rows


def load_data(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for record in world.records.values():
        if record.source is None:
            world.rows[record.name] = []
            continue
        fields = world.fields(record.name)
        types = {f.name: world.field_types.get((record.name, f.name), T.ANY) for f in fields}
        loaded = _load_table(world, world.module(record), record.source, record.span, fields,
                             types, f"record '{record.name}'", diagnostics)
        if loaded is None:
            continue
        path, rows = loaded
        if record.key is not None:
            counts = Counter(_hashable(r.get(record.key)) for r in rows)
            dupes = sorted({str(k) for k, n in counts.items() if n > 1})
            if dupes:
                diagnostics.error("E208", f"{path.name}: duplicate key {', '.join(dupes)} in "
                                  f"'{record.name}'", record.span)
        for f in fields:
            if f.canary:
                values = [str(r.get(f.name)) for r in rows if r.get(f.name) not in (None, "")]
                if len(values) != len(rows) or len(set(values)) != len(values):
                    diagnostics.error("E208", f"canary field '{f.name}' needs a unique, "
                                      f"non-empty value in every row of {path.name}", f.span,
                                      "a canary value identifies exactly one record's field")
        world.rows[record.name] = rows
    for decl, module in world.instances_from[:1]:
        loaded = _load_table(world, module, decl.source, decl.span, decl.fields,
                             dict(world.instance_types), "the instance fields", diagnostics)
        if loaded is not None:
            world.instances.extend(loaded[1])
    for inline in world.instance_decls.values():
        row: dict[str, Any] = {"id": inline.name}
        for assignment in inline.assignments:
            expr = assignment.value
            if isinstance(expr, A.LiteralExpr):
                row[assignment.name] = expr.value
            elif isinstance(expr, A.ListExpr) and all(isinstance(i, A.LiteralExpr)
                                                      for i in expr.items):
                row[assignment.name] = [i.value for i in expr.items]  # type: ignore[union-attr]
            else:
                diagnostics.error("E404", "instance fields must be constants", expr.span)
        world.instances.append(row)
    ids = [str(i.get("id")) for i in world.instances]
    where = world.instances_from[0][0].span if world.instances_from else (
        next(iter(world.instance_decls.values())).span if world.instance_decls else None)
    for dupe in sorted(i for i, n in Counter(ids).items() if n > 1):
        diagnostics.error("E208", f"two instances have id '{dupe}'", where,
                          "instance ids must be unique")
    for doc in world.documents.values():
        module = world.module(doc)
        doc_path = resolve_data_path(_base(module), doc.source, doc.span, diagnostics)
        data = read_world_file(world, doc_path, doc.span, diagnostics, "document") \
            if doc_path else None
        if doc_path is None or data is None:
            continue
        try:
            world.document_texts[doc.name] = data.decode("utf-8")
            world.data_files[data_ref(module, doc.source)] = data
        except UnicodeDecodeError:
            diagnostics.error("E102", f"{doc_path.name} is not valid UTF-8", doc.span,
                              "re-save the document as UTF-8")
