"""The target tree: git, the patch plan, the journal, apply, revert and verify.

The promise kept here: the tree is left byte for byte as it was found. The journal (under `.git/`, so
the tree stays clean) is written before the first byte changes and lists exactly what to restore from
the base commit and what to delete; revert restores exactly that — never a blanket `git clean`, which
would delete the user's own files — then compares tracked, untracked and ignored files and .git's config
and hooks with what was there before (treescan.py). Only a verified revert removes the journal.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ..common.diffheaders import git_unquote
from ..common.protocol import JOURNAL_VERSION, FileEntry, Journal, PatchEntry, RevertReport, Status
from .checkout import git_reason, restore_ref
from .errors import FailureFacts, StageFailed
from .hostio import copy_raw, deepest_first, read_json, run, write_json_atomic
from .newfiles import check_folders, parents, write_file
from .treescan import describe, git_manifest, ignored_manifest, spec_refusal, write_problem

GIT_CHUNK = 200  # paths per `git checkout` call, well below any argv limit
MANIFEST = "manifest.json"  # under .git/harness/: the tree before the attempt, path by path
BACKUP = "backup"  # under .git/harness/: the raw bytes of every tracked file the patches touch
UNVERIFIED = "revert-unverified"  # journal state: its agent reverted and the tree still differs


class Git:
    def __init__(self, repo: str) -> None:
        self.repo = repo

    def __call__(self, *args: str, env: Optional[Mapping[str, str]] = None, check: bool = True,
                 input_bytes: Optional[bytes] = None) -> Any:
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        p = run(["git", "-C", self.repo] + list(args), env=full_env, input_bytes=input_bytes)
        if check and p.returncode != 0:
            raise StageFailed(Status.PREFLIGHT_FAILED, "git %s failed: %s" % (
                " ".join(args[:3]), p.stderr.decode(errors="replace").strip()[-1500:]))
        return p

    def out(self, *args: str, **kw: Any) -> str:
        return str(self(*args, **kw).stdout.decode(errors="surrogateescape"))

    def gitdir(self) -> Optional[str]:
        p = self("rev-parse", "--absolute-git-dir", check=False)
        return p.stdout.decode().strip() if p.returncode == 0 else None

    def status_entries(self) -> list[str]:
        """The paths of git status's entries: tracked changes and untracked-not-ignored files (porcelain v1
        -z: `XY path`, one per NUL-terminated entry; with --no-renames a rename is a deletion and an addition)."""
        raw = self.out("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        return [entry[3:] for entry in raw.split("\0") if entry]

    def tracked(self, paths: Sequence[str]) -> set[str]:
        if not paths:
            return set()
        p = self("ls-files", "-z", "--", *paths)
        return set(x for x in p.stdout.decode(errors="surrogateescape").split("\0") if x)

    def manifest(self) -> dict[str, str]:
        """The work tree as it is on disk, byte for byte: {path: what is there} for every tracked file
        (`missing` when deleted) and every untracked file that is not ignored.

        Read without any git filter: with `core.autocrlf` or an eol attribute, git's own hash of a file
        (what `git add` would store) can stay the same while its bytes changed; this cannot.
        """
        raw = self.out("ls-files", "-z", "--cached", "--others", "--exclude-standard")
        return {rel: describe(os.path.join(self.repo, rel)) for rel in sorted(set(raw.split("\0")) - {""})}

    def ignored(self) -> list[str]:
        """Every untracked file that .gitignore hides (a file new in an ignored folder counts too)."""
        raw = self.out("ls-files", "-z", "--others", "--ignored", "--exclude-standard")
        return sorted(set(raw.split("\0")) - {""})


def digest(manifest: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def numstat_paths(raw: str) -> set[str]:
    """Paths from `git apply --numstat -z`: a NUL-terminated `added\\tdeleted\\tpath` per file. git apply names
    a rename by its new path only (`apply` adds the old one from git status); the form `git diff` gives a
    rename — an empty path, then old and new as the next two NUL-terminated fields — is read too."""
    out: set[str] = set()
    fields = iter(raw.split("\0"))
    for field in fields:
        cols = field.split("\t", 2)  # a path may itself hold a tab
        if len(cols) >= 3:
            out.update([cols[2]] if cols[2] else [next(fields), next(fields)])
    return out


def rename_sources(patch_text: str) -> set[str]:
    """The old paths of renames in a patch: `git apply --numstat` names a rename by its new path only, but
    the old path is deleted by the patch, so the journal must restore it too."""
    return {git_unquote(line[len("rename from "):].rstrip("\r"))
            for line in patch_text.split("\n") if line.startswith("rename from ")}


class Tree:
    """One target repo: its git, its journal file, and a scratch folder outside the tree."""

    def __init__(self, repo: str, scratch_dir: str) -> None:
        self.repo = repo
        self.git = Git(repo)
        self.scratch_dir = scratch_dir
        self.harness_dir: Optional[str] = None
        self.journal_path: Optional[str] = None
        self.manifest_before: dict[str, str] = {}
        self.git_dirs: list[str] = []  # real paths of its git dir and common dir: never written by a patch set
        self.common_dir: Optional[str] = None  # where config and hooks live (a linked worktree shares them)

    def open(self) -> str:
        """Check the repo, make `.git/harness/`; return that folder."""
        fix = "; set `repo:` of this host in the host inventory (hosts.yaml) to the target's git checkout"
        if not os.path.isdir(self.repo):
            what = "is a file, not a folder" if os.path.lexists(self.repo) else "does not exist on the host"
            raise StageFailed(Status.PREFLIGHT_FAILED, "target repo %s %s%s" % (self.repo, what, fix))
        gitdir = self.git.gitdir()
        if gitdir is None:
            raise StageFailed(Status.PREFLIGHT_FAILED, "%s is not a git repository%s" % (self.repo, fix))
        self.harness_dir = os.path.join(gitdir, "harness")
        common = self.git.out("rev-parse", "--git-common-dir").strip() or gitdir
        self.common_dir = os.path.join(self.repo, common)
        self.git_dirs = sorted({os.path.realpath(gitdir), os.path.realpath(self.common_dir)})
        os.makedirs(self.harness_dir, exist_ok=True)
        self.journal_path = os.path.join(self.harness_dir, "journal.json")
        return self.harness_dir

    # ------------------------------------------------------------------ before

    def full_manifest(self, ignored: Iterable[str]) -> dict[str, str]:
        """What revert verification compares: the tree byte for byte (tracked and untracked files), the
        `ignored` files (those that were there before, Python's caches aside) by type, size and mtime, and
        git's config and hooks by content — a hook is code git itself runs, the revert's checkout included."""
        manifest = self.git.manifest()
        manifest.update(ignored_manifest(self.repo, ignored))
        assert self.common_dir is not None
        manifest.update(git_manifest(self.common_dir))
        return manifest

    def snapshot(self, ignored: Iterable[str] = ()) -> str:
        """The tree as it is now (see `full_manifest`): kept beside the journal (to name what differs should
        the revert not match it) and returned as one digest for the journal."""
        assert self.harness_dir is not None
        manifest = self.full_manifest(ignored)
        write_json_atomic(os.path.join(self.harness_dir, MANIFEST), manifest)
        self.manifest_before = manifest
        return digest(manifest)

    def head(self) -> str:
        return self.git.out("rev-parse", "HEAD").strip()

    def check_base(self, base_ref: Optional[str], head: str) -> None:
        if not base_ref:
            return
        p = self.git("rev-parse", "--verify", base_ref + "^{commit}", check=False)
        want = p.stdout.decode().strip()
        if p.returncode != 0:
            raise StageFailed(Status.PREFLIGHT_FAILED, "base_ref %r is not known in %s" % (base_ref, self.repo))
        if want != head:
            raise StageFailed(Status.PREFLIGHT_FAILED, "HEAD is %s but the experiment pins base_ref %r = %s"
                              % (head[:12], base_ref, want[:12]))

    def dirty_paths(self, allow: Sequence[str]) -> tuple[list[str], list[str]]:
        """(every dirty path, those no allow-list glob covers); refuse the latter."""
        dirty = self.git.status_entries()
        unexpected = [p for p in dirty if not any(fnmatch.fnmatch(p, g) for g in allow)]
        if unexpected:
            raise StageFailed(Status.PREFLIGHT_FAILED, "target tree %s is not clean; %d dirty path(s): %s" % (
                self.repo, len(unexpected), ", ".join(unexpected[:30])), facts=FailureFacts(dirty=unexpected))
        return dirty, unexpected

    def plan(self, patches: list[PatchEntry], files: list[FileEntry], dirty_before: list[str],
             patch_dir: str, head: str) -> dict[str, Any]:
        """Write the patches out, check they apply (changing nothing), learn every path they touch."""
        refused = spec_refusal(patches, files)
        if refused:
            raise StageFailed(Status.APPLY_FAILED, refused)
        os.makedirs(patch_dir, exist_ok=True)
        patch_paths = []
        for i, p in enumerate(patches):
            path = os.path.join(patch_dir, "%02d-%s-%s" % (i, p.set, p.name))
            with open(path, "w") as f:
                f.write(p.text)
            patch_paths.append(path)
        touched: set[str] = set()
        if patch_paths:
            check = self.git("apply", "--check", "--whitespace=nowarn", *patch_paths, check=False)
            if check.returncode != 0:
                raise StageFailed(Status.APPLY_FAILED,
                                  self._name_failing_patch(patches, patch_paths, head, check.stderr))
            touched.update(numstat_paths(self.git.out("apply", "--numstat", "-z", "--whitespace=nowarn",
                                                      *patch_paths)))
            for p in patches:
                touched.update(rename_sources(p.text))
        for entry in files:
            self._refuse_escape(entry.path, True, "patch set %s: files/%s" % (entry.set, entry.path))
            check_folders(self.repo, entry)
            touched.add(entry.path)
        tracked = self.git.tracked(sorted(touched))
        clash = sorted(touched & set(dirty_before))
        if clash:
            raise StageFailed(Status.PREFLIGHT_FAILED, "patches touch paths that are dirty (allow-listed) in the "
                              "target tree: %s" % ", ".join(clash))
        delete = sorted(touched - tracked)
        for rel in delete:
            if os.path.lexists(os.path.join(self.repo, rel)):
                raise StageFailed(Status.APPLY_FAILED, "would overwrite %s, which exists but is not tracked by git "
                                  "(your file? move it away first)" % rel)
        created_dirs = set()
        for rel in delete:
            d = os.path.dirname(rel)
            while d and not os.path.isdir(os.path.join(self.repo, d)):
                created_dirs.add(d)
                d = os.path.dirname(d)
        return {"patch_paths": patch_paths, "files": files, "restore": sorted(touched & tracked), "delete": delete,
                "created_dirs": deepest_first(created_dirs)}

    def _refuse_escape(self, rel: str, whole_file: bool, what: str) -> None:
        problem = write_problem(self.repo, self.git_dirs, rel, whole_file)
        if problem:
            raise StageFailed(Status.APPLY_FAILED, "%s %s: refused, a patch set writes only inside the work tree "
                              "(never through a symbolic link, never into .git)" % (what, problem))

    def _name_failing_patch(self, patches: list[PatchEntry], paths: list[str], head: str, err: bytes) -> str:
        """Patches apply as a series and the whole series did not (git said `err`): the first patch whose
        series does not apply is the one to name — the last one when every shorter series applies."""
        culprit = patches[-1]
        for k in range(1, len(paths)):
            p = self.git("apply", "--check", "--whitespace=nowarn", *paths[:k], check=False)
            if p.returncode != 0:
                culprit, err = patches[k - 1], p.stderr
                break
        text = err.decode(errors="replace").strip()
        return "patch set %s, %s does not apply to %s at %s: %s\n%s" % (
            culprit.set, culprit.name, self.repo, head[:12], git_reason(text), text[-3000:])

    # ------------------------------------------------------------------ apply

    def new_journal(self, run_id: str, attempt_id: str, marker: str, base: str, dirty_before: list[str],
                    plan: Mapping[str, Any]) -> Journal:
        return Journal(run_id=run_id, attempt_id=attempt_id, marker=marker, version=JOURNAL_VERSION,
                       agent_pid=os.getpid(), repo=self.repo, base_commit=base, tree_before=None,
                       dirty_before=dirty_before, restore=plan["restore"], delete=plan["delete"],
                       created_dirs=plan["created_dirs"], server=None, state="applying",
                       created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def save(self, journal: Journal) -> None:
        assert self.journal_path is not None
        write_json_atomic(self.journal_path, journal.to_dict())

    def begin(self, journal: Journal) -> None:
        """"As found": the tree right before its first change (a bisect step's checkout, else the patches'), kept
        in the journal, which is saved before that change."""
        journal.ignored_before = self.git.ignored()
        journal.tree_before = self.snapshot(journal.ignored_before)
        self.save(journal)

    def apply(self, journal: Journal, plan: Mapping[str, Any]) -> None:
        """All or nothing: the journal first, then git apply (which writes nothing when it fails)."""
        assert self.harness_dir is not None
        backup = os.path.join(self.harness_dir, BACKUP)
        journal.backup = backup
        if journal.tree_before is None:
            self.begin(journal)  # before the first byte changes
        else:
            self.save(journal)  # the checkout's journal, now with the patches' paths, before their first byte
        if os.path.lexists(backup):
            shutil.rmtree(backup)  # our own folder under .git/harness, left by an attempt that was recovered
        for rel in journal.restore:  # the bytes as they are, whatever git's filters would make of them
            copy_raw(os.path.join(self.repo, rel), os.path.join(backup, rel))
        if plan["patch_paths"]:
            p = self.git("apply", "--whitespace=nowarn", *plan["patch_paths"], check=False)
            if p.returncode != 0:
                text = p.stderr.decode(errors="replace").strip()
                raise StageFailed(Status.APPLY_FAILED, "git apply failed: %s\n%s" % (git_reason(text), text[-3000:]))
        # Checked again on the tree as the patches left it (links they made), before any whole file is
        # written: a refusal here is reverted like any failed attempt, from the journal saved above.
        for rel in plan["restore"] + plan["delete"]:
            self._refuse_escape(rel, False, "the patches write %s, which" % rel)
        for entry in plan["files"]:
            self._refuse_escape(entry.path, True, "patch set %s: files/%s" % (entry.set, entry.path))
        for entry in plan["files"]:
            write_file(self.repo, entry)
        # Cross-check with git: anything changed that the journal does not cover is added to it.
        changed = set(self.git.status_entries()) - set(journal.dirty_before)
        extra = sorted(changed - set(journal.restore) - set(journal.delete))
        if extra:
            tracked = self.git.tracked(extra)
            journal.restore = sorted(set(journal.restore) | (set(extra) & tracked))
            journal.delete = sorted(set(journal.delete) | (set(extra) - tracked))
            # Folders the missed new files brought: those no file lived in before the attempt.
            had_files = {d for p in self.manifest_before for d in parents(p)}
            created = {d for p in set(extra) - tracked for d in parents(p) if d not in had_files}
            journal.created_dirs = deepest_first(set(journal.created_dirs) | created)
        journal.state = "applied"
        self.save(journal)

    def compile_errors(self, journal: Journal) -> tuple[list[str], list[str]]:
        """(patched or new .py files, those that do not compile under the host's Python)."""
        errors = []
        paths = [p for p in journal.restore + journal.delete if p.endswith(".py")]
        for rel in paths:
            path = os.path.join(self.repo, rel)
            if not os.path.exists(path):
                continue
            try:
                with open(path, "rb") as f:
                    compile(f.read(), rel, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                errors.append("%s: %s" % (rel, exc))
        return paths, errors

    # ------------------------------------------------------------------ revert and verify

    def revert(self, journal: Journal) -> RevertReport:
        """Restore exactly what the journal lists — the bytes saved before applying, else the base commit's
        version — then compare the tree with the snapshot, byte for byte. Only a verified revert removes
        the journal: an unverified one keeps it, so the next preflight refuses this tree."""
        restore = journal.restore
        for i in range(0, len(restore), GIT_CHUNK):  # index and tree as git has them...
            self.git("checkout", journal.base_commit, "--", *restore[i:i + GIT_CHUNK])
        backup: Optional[str] = journal.backup
        for rel in restore:  # ...then the bytes exactly as they were (git's filters may differ)
            if backup:
                copy_raw(os.path.join(backup, rel), os.path.join(self.repo, rel))
        for rel in journal.delete:
            path = os.path.join(self.repo, rel)
            if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):  # a link to a folder too
                os.remove(path)
        for rel in journal.created_dirs:
            try:
                os.rmdir(os.path.join(self.repo, rel))
            except OSError:
                pass
        co = journal.checkout  # a bisect step: HEAD and its branch back, once the checked-out files are as committed
        head_diff = restore_ref(self.git, co.head, co.branch) if co is not None else []
        after = self._manifest_after(journal)
        verified = digest(after) == journal.tree_before and not head_diff
        assert self.journal_path is not None and self.harness_dir is not None
        before_file = os.path.join(self.harness_dir, MANIFEST)
        diff: list[str] = []
        if verified:
            os.remove(self.journal_path)
            for leftover in (backup, before_file):
                if leftover and os.path.isdir(leftover):
                    shutil.rmtree(leftover)
                elif leftover and os.path.exists(leftover):
                    os.remove(leftover)
        else:
            before = read_json(before_file) if os.path.exists(before_file) else {}
            diff = head_diff + sorted(os.fsencode(p).decode(errors="replace")  # shown to people: no lone surrogates
                                      for p in set(before) | set(after) if before.get(p) != after.get(p))
        result = RevertReport(verified=verified, tree_before=journal.tree_before, tree_after=digest(after), diff=diff)
        if journal.ignored_before is not None:
            # Not part of the promise (ignored files are not the user's tree) but worth knowing: what the
            # attempt left where .gitignore hides it — build outputs, caches, a core dump in an ignored folder.
            new = sorted(set(self.git.ignored()) - set(journal.ignored_before))
            if new:
                result.stray_ignored = [os.fsencode(p).decode(errors="replace") for p in new[:200]]
        return result

    def _manifest_after(self, journal: Journal) -> dict[str, str]:
        """The manifest the journal's `tree_before` was taken as: a version 2 journal (an older agent's)
        covered tracked and untracked files only."""
        if journal.version < 3:
            return self.git.manifest()
        return self.full_manifest(journal.ignored_before or [])

    def leftover_journal(self) -> Optional[Journal]:
        assert self.journal_path is not None
        if not os.path.exists(self.journal_path):
            return None
        data = read_json(self.journal_path)
        return Journal.read(data) if isinstance(data, dict) else None
