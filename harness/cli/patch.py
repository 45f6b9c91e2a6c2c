"""`harness validate` (experiments, sweeps and hosts files) and `harness patch new` / `patch check`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from ..errors import ConfigError, ExitCode
from ..experiments.project import default_patches_dir, default_patches_dir_here
from ..experiments.resolve import resolve
from .common import err, exit_on_errors, out

if TYPE_CHECKING:
    from ..experiments.patchsets import PatchSet


def validate(
    files: Optional[list[Path]] = typer.Argument(None, help="YAML files (default: experiments/**.yaml, hosts.yaml)."),
    against: Optional[Path] = typer.Option(None, "--against", help="A local copy of the target source: dry-apply "
                                                                 "every referenced patch set to it."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
) -> None:
    """Check experiments, sweeps and hosts files (and, with --against, that their patches apply and compile)."""
    from ..common.targetid import target_names
    from ..experiments.files import ExperimentFile, SweepFile, kind_of, read_any_file
    from ..experiments.plan import plan_sweep

    with exit_on_errors():
        if not files:
            files = sorted(Path("experiments").rglob("*.yaml")) + ([Path("hosts.yaml")] if Path("hosts.yaml").is_file()
                                                                  else [])
        problems: list[str] = []
        patch_sets = {}
        for f in files:
            try:
                read = read_any_file(f)
                kind = kind_of(read)
                pdir = patches_dir or default_patches_dir(f)
                if isinstance(read, SweepFile):
                    for a in plan_sweep(read, pdir, {}).attempts:
                        patch_sets.update({s.name: s for s in a.resolved.patch_sets})
                elif isinstance(read, ExperimentFile):
                    r = resolve(read.experiment, f, pdir, doc=read.doc)
                    patch_sets.update({s.name: s for s in r.patch_sets})
                out.print(f"[green]ok[/]   {escape(str(f))} ({kind})", highlight=False)
            except ConfigError as exc:
                problems.append(str(exc))
                out.print(f"[red]fail[/] {escape(str(exc))}", highlight=False)
        if against is not None:
            if not against.is_dir():
                raise ConfigError(f"--against {against}: not a folder")
            names = target_names(str(against))
            for name, ps in sorted(patch_sets.items()):
                answers = names[:1] if ps.has_variants else names  # a variant is picked by the identity alone
                if ps.applies_to and answers and not set(answers) & set(ps.applies_to):
                    out.print(f"skip {name}: made for {', '.join(ps.applies_to)}, the target is {names[0]}",
                              highlight=False)
                    continue
                problems += _dry_check_and_report(ps, against)
        if problems:
            err.print(f"{len(problems)} problem(s)", style="red")
            raise typer.Exit(ExitCode.CONFIG)


def patch_new(
    name: str = typer.Argument(..., help="Name of the new patch set (its folder under the patches directory)."),
    checkout: Path = typer.Option(..., "--from", help="Root of your local SGLang git checkout."),
    commit_range: Optional[str] = typer.Option(None, "--range", help="Commits A..B instead of the uncommitted "
                                                                    "changes: one patch file per commit."),
    squash: bool = typer.Option(False, "--squash", help="With --range: one patch file from A to B."),
    description: Optional[str] = typer.Option(None, "--description", help="One line for patchset.yaml."),
    applies_to: Optional[str] = typer.Option(None, "--applies-to", help="sglang==<version>, when the checkout's "
                                                                       "version cannot be read."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing patch set of that name."),
) -> None:
    """Make a patch set from your checkout's changes.

    Its uncommitted changes (untracked files included), or --range's commits, become patch files, with a
    patchset.yaml (applies_to: the checkout's SGLang) and a README stub to finish. What a patch cannot carry
    byte for byte (a nested repository or submodule, a fifo, a link out of the checkout, a file git's
    filters rewrite) is refused by path, and nothing is written."""
    from ..patchtools.new import make_patch_set

    with exit_on_errors():
        ps = make_patch_set(name, checkout, patches_dir or default_patches_dir_here(), commit_range=commit_range,
                            squash=squash, description=description, applies_to=applies_to, force=force)
        variant = ps.variants[0]
        out.print(f"[green]created[/] patch set {escape(ps.name)} in {escape(str(ps.folder))} for "
                  f"{', '.join(ps.applies_to)}: {len(variant.patches)} patch file(s), sha256 {ps.sha256[:16]}",
                  highlight=False)
        for p in variant.patches:
            out.print(f"    {escape(p.name)}", highlight=False)
        pdir_opt = f" --patches-dir {patches_dir}" if patches_dir else ""
        out.print(f"check it against a clean checkout: harness patch check {ps.name} --against <dir>{pdir_opt}",
                  highlight=False)


def patch_check(
    name: str = typer.Argument(..., help="Patch set name (a folder under the patches directory)."),
    against: Path = typer.Option(..., "--against", help="A local SGLang checkout; it is never written."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
) -> None:
    """Check that a patch set applies to a checkout and compiles.

    The variant for the checkout's SGLang is applied to a scratch copy of the files it touches (the
    checkout is never written): what `validate --against` does, for one set."""
    from ..common.targetid import target_names
    from ..experiments.patchsets import load_patch_set

    with exit_on_errors():
        ps = load_patch_set(patches_dir or default_patches_dir_here(), name)
        if not against.is_dir():
            raise ConfigError(f"--against {against}: not a folder")
        names = target_names(str(against))
        if not ps.has_variants and ps.applies_to and names and not set(names) & set(ps.applies_to):
            out.print(f"note: {name} is made for {', '.join(ps.applies_to)}, the checkout is {names[0]}; checking "
                      "anyway", highlight=False)
        if _dry_check_and_report(ps, against):
            raise typer.Exit(ExitCode.CONFIG)


def _dry_check_and_report(ps: PatchSet, against: Path) -> list[str]:
    """Dry-apply one patch set to a copy of `against` (patchcheck.py), print ok or each problem; the problems."""
    from ..patchtools.check import dry_check

    found = dry_check(ps, against)
    for p in found:
        out.print(f"[red]fail[/] {escape(p)}", highlight=False)
    if not found:
        out.print(f"[green]ok[/]   patch set {ps.name} applies to {against} and compiles", highlight=False)
    return found
