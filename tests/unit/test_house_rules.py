"""The house rules of issue #32, checked on the code as it is: modules stay small, a status is the `Status`
enum everywhere but where it is defined and stored, and the controller reads the agent's final report by its
typed attributes, never by string keys. And of issue #46, on the patch sets: a variant holds only what differs
from what it inherits, and a kernels/ file is named (`files_from`), never copied under patches/."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from harness.common.protocol import Status

# mutmut rewrites the sources it mutates (trampolines, longer modules): the rules are about ours.
pytestmark = pytest.mark.skipif("/mutants/" in __file__, reason="mutmut's rewritten copy of the sources")
PACKAGE = Path(__file__).resolve().parents[2] / "harness"
MAX_LINES = 400
# Where a status may be spelled as a string: its definition and the record's schema on disk.
STATUS_HOMES = {"common/protocol.py", "common/outcome.py", "results/schemas.py"}


def harness_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "sim/template" not in p.as_posix()]


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in harness_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def _names_a_status(node: ast.AST) -> bool:
    """`status`, `r.status`, `st["status"]`, `st.get("status")`: an operand that holds a status."""
    if isinstance(node, ast.Name):
        return "status" in node.id
    if isinstance(node, ast.Attribute):
        return "status" in node.attr
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    if isinstance(node, ast.Call):
        return any(isinstance(a, ast.Constant) and a.value == "status" for a in node.args)
    return False


def status_literals_compared(tree: ast.AST) -> list[int]:
    """Line numbers where a status is compared with a string spelling one (==, !=, in). A verdict's category
    "hung" is not a status: only comparisons with an operand that holds a status count."""
    values = {s.value for s in Status}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            consts = [c for o in operands for c in ([o] if not isinstance(o, (ast.Tuple, ast.List, ast.Set))
                                                      else o.elts)]
            if any(isinstance(c, ast.Constant) and c.value in values for c in consts) and \
                    any(_names_a_status(o) for o in operands):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_status_string_compared_outside_the_protocol_and_the_schema():
    found = {}
    for path in harness_files():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in STATUS_HOMES:
            continue
        if lines := status_literals_compared(ast.parse(path.read_text())):
            found[rel] = lines
    assert not found, f"status strings compared (use protocol.Status): {found}"


def test_the_rule_sees_a_status_string_compared():
    seen = 'if r.status == "crashed":\n    pass\nif st.get("status") in ("ok", "y"):\n    pass\nif st["status"] != "hung": pass'
    assert status_literals_compared(ast.parse(seen)) == [1, 3, 5]
    assert status_literals_compared(ast.parse("if r.status == Status.CRASHED: pass")) == []
    assert status_literals_compared(ast.parse('if verdict.category == "hung": pass')) == []  # not a status


FINAL_BY_KEY = re.compile(r"\bfinal(?:\.get\(|\[)\s*[\"']")


def test_the_controller_reads_the_final_report_by_attribute():
    found = {}
    for path in harness_files():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("agent/", "common/")):
            continue
        if hits := [i for i, line in enumerate(path.read_text().splitlines(), 1) if FINAL_BY_KEY.search(line)]:
            found[rel] = hits
    assert not found, f"final report read by string key: {found}"


def layout_modules(text: str) -> set[str]:
    """`pkg/name.py` for each module line of docs/layout.md's harness/ tree (two-space indents by package)."""
    block = text.split("```\nharness/\n", 1)[1].split("```", 1)[0]
    found, package = set(), ""
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line.startswith("  "):  # past harness/: the repo's other folders
            break
        word = line.split()[0].rstrip(",")
        if line.startswith("    ") and word.endswith(".py"):
            found.add(f"{package}/{word}")
        elif not line.startswith("    "):
            package = word.rstrip("/") if word.endswith("/") else ""
            found.update(w.rstrip(",") for w in line.split("   ")[0].split() if w.rstrip(",").endswith(".py"))
    return found


def test_the_layout_page_names_every_module():
    listed = layout_modules((PACKAGE.parent / "docs" / "layout.md").read_text())
    modules = {p.relative_to(PACKAGE).as_posix() for p in harness_files()
               if p.name != "__init__.py" and not p.relative_to(PACKAGE).as_posix().startswith("sim/")}
    modules.add("__init__.py")
    assert modules - listed == set(), "add a line to docs/layout.md for each"
    assert listed - modules == set(), "docs/layout.md names modules that are gone"


# --------------------------------------------------------------------------- patch sets (issue #46)

PROJECT = PACKAGE.parent
HEADER = re.compile(rb"(?:#[^\n]*\n)*")  # leading comment lines: a generated-copy header


def redundant_variant_files(patches: Path) -> list[str]:
    """Files of a variant folder with the same bytes as what the variant inherits without them: the top level's
    patch file or files/ entry of that name, or the project file `files_from` names for that path."""
    found = []
    for meta_file in sorted(patches.glob("*/patchset.yaml")):
        meta = yaml.safe_load(meta_file.read_text()) or {}
        top, files_from = meta_file.parent, meta.get("files_from") or {}
        for spec in (meta.get("variants") or {}).values():
            sub = top / (spec if isinstance(spec, str) else spec["folder"])
            for f in sorted(sub.glob("*.patch")) + sorted(p for p in sub.glob("files/**/*") if p.is_file()):
                rel = f.relative_to(sub)
                inherited = top / rel
                if rel.parts[0] == "files" and "/".join(rel.parts[1:]) in files_from:
                    inherited = patches.parent / files_from["/".join(rel.parts[1:])]
                if inherited.is_file() and inherited.read_bytes() == f.read_bytes():
                    found.append(f.relative_to(patches).as_posix())
    return found


def kernel_copies(patches: Path, kernels: Path) -> list[str]:
    """Files under patches/ that are a kernels/ file: byte for byte, or behind leading comment lines."""
    sources = {k.relative_to(kernels).as_posix(): k.read_bytes() for k in sorted(kernels.rglob("*.py"))}
    found = []
    for f in sorted(p for p in patches.rglob("*") if p.is_file()):
        data = f.read_bytes()
        found += [f"{f.relative_to(patches).as_posix()} (kernels/{name})" for name, k in sources.items()
                  if k and data.endswith(k) and HEADER.fullmatch(data[:len(data) - len(k)])]
    return found


def test_no_variant_file_repeats_what_the_variant_inherits():
    assert redundant_variant_files(PROJECT / "patches") == [], "delete them: the variant inherits those bytes"


def test_no_kernel_is_copied_under_patches():
    assert kernel_copies(PROJECT / "patches", PROJECT / "kernels") == [], (
        "name the kernel under files_from in the set's patchset.yaml instead (docs/patch-sets.md)")


def test_the_patch_set_rules_see_a_repeated_file_and_a_copied_kernel(tmp_path):
    k = b"def kernel():\n    return 1\n"
    files = {"kernels/k.py": k,
             "patches/s/patchset.yaml": b"variants: {sglang==0.5.16: old}\nfiles_from: {pkg/k.py: kernels/k.py}\n",
             "patches/s/0001-a.patch": b"same\n", "patches/s/old/0001-a.patch": b"same\n",
             "patches/s/files/pkg/m.py": b"M = 1\n", "patches/s/old/files/pkg/m.py": b"M = 2\n",
             "patches/s/old/files/pkg/k.py": k,  # what files_from gives the variant anyway
             "patches/t/files/pkg/copy.py": b"# Generated from kernels/k.py: do not edit.\n" + k,
             "patches/t/files/pkg/edited.py": b"# Generated from kernels/k.py\n" + k.replace(b"1", b"2"),
             "patches/t/files/pkg/wrapped.py": b"import x\n" + k}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    assert redundant_variant_files(tmp_path / "patches") == ["s/old/0001-a.patch", "s/old/files/pkg/k.py"]
    assert kernel_copies(tmp_path / "patches", tmp_path / "kernels") == [
        "s/old/files/pkg/k.py (kernels/k.py)", "t/files/pkg/copy.py (kernels/k.py)"]


# The attempt folder's file names (results/attemptdir.py knows them all): spelled nowhere else on the controller's
# side. The agent (and `common/`, which ships with it) names its own files on the host.
ATTEMPT_FOLDER_OWNER = "results/attemptdir.py"
ATTEMPT_FILE_WORDS = ("record.json", "record.partial.json", "server.log", "stack-dump.txt", "answers.json", "bench-",
                      ".warmup")


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def attempt_paths_built(tree: ast.AST) -> list[int]:
    """Line numbers where a module spells a name of the attempt folder (docstrings aside), or joins "profile" to
    a path."""
    docs = _docstrings(tree)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and any(word in node.value for word in ATTEMPT_FILE_WORDS):
            lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and node.right.value == "profile":
            lines.append(node.lineno)
    return sorted(set(lines))


def test_only_the_attempt_folders_owner_names_its_files():
    found = {}
    for path in harness_files():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == ATTEMPT_FOLDER_OWNER or rel.startswith(("agent/", "common/", "sim/")):
            continue
        if lines := attempt_paths_built(ast.parse(path.read_text())):
            found[rel] = lines
    assert not found, f"attempt folder paths built outside {ATTEMPT_FOLDER_OWNER} (ask an AttemptDir): {found}"


def test_the_rule_sees_an_attempt_path_built():
    seen = ('"""record.json in a docstring is fine."""\n'
            'log = folder / "server.log"\n'
            'jsonl = folder / f"bench-{case}.jsonl"\n'
            'traces = (d / "profile").glob("*")\n'
            'ok = folder / SERVER_LOG\n')
    assert attempt_paths_built(ast.parse(seen)) == [2, 3, 4]


# --------------------------------------------------------------------------- one record type (issue #46)

# A record model may wrap an agent's dataclass only where it keeps something differently, said here.
RECORD_WRAPPERS = {"Recovered": "keeps the journal verbatim, as a dict: a journal of any agent version"}


def mirrored_messages(models: list[type], messages: list[type]) -> list[str]:
    """Pydantic models whose fields are an agent dataclass's fields: a second definition of that part."""
    found = []
    for model in models:
        names = set(model.model_fields)
        for msg in messages:
            fields = {f.name for f in dataclasses.fields(msg)}
            if len(fields) >= 2 and fields - {"name"} <= names <= fields and model.__name__ not in RECORD_WRAPPERS:
                found.append(f"{model.__name__} mirrors {msg.__name__}")
    return found


def _record_models() -> list[type]:
    import importlib
    import inspect

    from pydantic import BaseModel
    out = []
    for path in sorted((PACKAGE / "results").glob("*.py")):
        module = importlib.import_module(f"harness.results.{path.stem}")
        out += [c for _, c in inspect.getmembers(module, inspect.isclass)
                if issubclass(c, BaseModel) and c.__module__ == module.__name__]
    return out


def _messages() -> list[type]:
    import inspect

    from harness.common import outcome, protocol
    from harness.common.wire import Message
    return [c for m in (outcome, protocol) for _, c in inspect.getmembers(m, inspect.isclass)
            if issubclass(c, Message) and dataclasses.is_dataclass(c) and c.__module__ == m.__name__]


def test_no_record_model_repeats_an_agent_dataclass():
    assert mirrored_messages(_record_models(), _messages()) == [], (
        "keep the agent's dataclass as the record's part (results/schemas.py `Given`/`Whole`)")


def test_the_record_rule_sees_a_mirror():
    from pydantic import BaseModel

    from harness.common.outcome import RevertReport, StopReport

    class Revert(BaseModel):  # the copy issue #46 removed
        verified: bool
        tree_before: str | None = None
        tree_after: str | None = None
        diff: list[str] | None = None
        stray_ignored: list[str] | None = None

    class Other(BaseModel):
        verified: bool
        reason: str

    assert mirrored_messages([Revert, Other], [RevertReport, StopReport]) == ["Revert mirrors RevertReport"]
