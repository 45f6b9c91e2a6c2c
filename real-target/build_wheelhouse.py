#!/usr/bin/env python3
"""Build the wheelhouse that puts SGLang 0.5.16 on a GPU host without network, in parts of a bounded size.

    build_wheelhouse.py --out OUT [--part-mib 55] [--cache DIR] [--requirements FILE]

Run it where there is network (Python >= 3.10, pip). It

1. reads the requirements file (default: requirements-sglang-0.5.16-torch-2.11.txt beside this script):
   every `name==version` pin except the lines marked `#skip`;
2. downloads each pin's wheel for the GPU host (CPython 3.12, x86_64 manylinux; pure wheels too) with
   `pip download --no-deps --only-binary=:all:` into a cache (reused by the next run);
3. slims what the serving path does not need: sglang-kernel loses its FA3 object
   (`sgl_kernel/flash_ops*.so`, 1.1 GB unpacked), `infllm_ops` and the SM100 build (`sgl_kernel/sm100/`);
   `sm90/common_ops` and `flashmla_ops` stay. The slimmed wheel's RECORD is rewritten, so pip installs it;
4. adds a stand-in `xgrammar` wheel built from xgrammar_standin/ (see its docstring);
5. re-packs every wheel uncompressed (ZIP_STORED: same files, same RECORD hashes) and packs the wheels
   into parts, each a folder `partIofN/` holding one solid `.tar.xz` (xz across whole wheels is about half
   the size of the wheels' own deflate) and a `.sha256` manifest; no part folder is over --part-mib.
   Wheels that install into the same top-level path (a namespace package, a data folder) go into the same
   part, so installing the parts one after another with `pip install --upgrade --target` never replaces
   what an earlier part put there (install_wheelhouse.sh merges bin/, which every wheel with scripts shares).
   SGLang's own wheel is listed in its part's `.keep` file: not installed, kept for make_target_repo.py.

On the GPU host: `install_wheelhouse.sh PART_DIR... --target DIR` (beside this script). `OUT/wheelhouse.json`
lists every part, its wheels and what was dropped.

Standard library only (pip is run as `python -m pip`).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import csv
import fnmatch
import hashlib
import io
import json
import lzma
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_REQUIREMENTS = HERE / "requirements-sglang-0.5.16-torch-2.11.txt"
STANDIN_SRC = HERE / "xgrammar_standin"
STANDIN_NAME, STANDIN_VERSION = "xgrammar", "0.0.0+standin"
MiB = 1024 * 1024

# The GPU host: CPython 3.12 on x86_64 (glibc >= 2.31). pip prefers a wheel by the order of these tags:
# the usual manylinux tags first; the last two only where a pin has no wheel for the others: llguidance 1.9.1
# (manylinux_2_31) and sglang 0.5.16 (manylinux_2_34; not installed, only unzipped by make_target_repo.py).
# Pure `py3-none-any` wheels are always accepted.
PYTHON_VERSION = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
)

# Members dropped from a wheel (normalized distribution name → fnmatch patterns; `*` crosses `/`). Only
# what the team's measured run on an H200 (2026-11-30) showed the serving path does not load. Every pattern must
# match something: a renamed file in a new release fails the build instead of slipping through unslimmed.
SLIM: dict[str, tuple[str, ...]] = {
    "sglang_kernel": (
        "sgl_kernel/flash_ops*.so",  # FA3 (the fa3 attention backend only): 1.1 GB unpacked, 326 MB packed
        "sgl_kernel/infllm_ops*",  # InfLLM-v2 sparse attention
        "sgl_kernel/sm100/*",  # the Blackwell build of common_ops (the H200 loads sm90/)
    ),
}
# Not dropped, because no run has shown them unneeded: the next candidates by their share of the parts (each
# wheel alone at xz -6; the parts hold ~65 MiB in all): sglang-kernel's sm90/common_ops + flashmla_ops 13 MiB
# (needed); sglang 8 (the target repo); flashinfer 6 (of which flashinfer/data, CUTLASS/CCCL headers and
# sources for its JIT: 62 MB unpacked); zstandard 3.8 (unstripped extension modules, 23 MB unpacked);
# transformers 3.3 (transformers/models: 37 MB unpacked; SGLang imports many model configs); cryptography 3.3;
# nvidia-cudnn-frontend 2.9; jedi 2.1 (its bundled typeshed stubs, jedi/third_party: 32 MB unpacked; IPython
# imports jedi); openai-harmony 2.1 (gpt-oss); tokenizers 2.1 (needed); py-spy 1.9 (the harness's stack
# dumps of a hung server); llguidance 1.9 (a grammar backend).

# Distributions whose wheel goes into the wheelhouse but not into the install target: SGLang itself is the
# target repo (make_target_repo.py lays this wheel out), so a copy in the target dir could only shadow it.
NOT_INSTALLED = frozenset({"sglang"})  # normalized names


class BuildError(RuntimeError):
    """The wheelhouse could not be built; the message says why."""


# ============================================================================ requirements


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    line: int

    @property
    def key(self) -> str:
        return normalize(self.name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Requirements:
    pins: tuple[Pin, ...]  # to download
    skipped: tuple[Pin, ...]  # marked #skip


_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)")
_SKIP = re.compile(r"\s*skip\b")


def normalize(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427/503): lower case, runs of -_. → _."""
    return re.sub(r"[-_.]+", "_", name).lower()


def parse_requirements(text: str) -> Requirements:
    """Every `name==version` line; those whose comment starts with `skip` (`pkg==1  #skip: why`) apart.

    Comment-only and empty lines are ignored; anything else (a range, an extra, a URL) and a package
    pinned twice are errors: the wheelhouse is exactly what the file names."""
    pins: list[Pin] = []
    skipped: list[Pin] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        spec, _, comment = raw.partition("#")
        spec = spec.strip()
        if not spec:
            continue
        m = _PIN.fullmatch(spec)
        if not m:
            raise BuildError(f"requirements line {lineno}: {spec!r} is not a 'name==version' pin")
        pin = Pin(m[1], m[2], lineno)
        if pin.key in seen:
            raise BuildError(f"requirements line {lineno}: {pin.name} is pinned already on line {seen[pin.key]}")
        seen[pin.key] = lineno
        (skipped if _SKIP.match(comment) else pins).append(pin)
    return Requirements(tuple(pins), tuple(skipped))


# ============================================================================ download


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name: name-version(-build)?-py-abi-platform.whl."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise BuildError(f"{filename} is not a wheel file name")
    return normalize(parts[0]), parts[1]


def cache_folder(root: Path, python_version: str = PYTHON_VERSION, platforms: Sequence[str] = PLATFORMS) -> Path:
    """The cache's folder for one target: pip picks other wheels for other platform tags (or their order)."""
    key = hashlib.sha256("\n".join([python_version, *platforms]).encode()).hexdigest()[:10]
    return root / f"cp{python_version.replace('.', '')}-{key}"


def cached_wheels(pin: Pin, cache: Path) -> list[Path]:
    out = []
    for path in sorted(cache.glob("*.whl")):
        name, version = wheel_name_version(path.name)
        if name == pin.key and version == pin.version:
            out.append(path)
    return out


def pip_download_argv(pins: Sequence[Pin], dest: Path, python_version: str = PYTHON_VERSION,
                      platforms: Sequence[str] = PLATFORMS) -> list[str]:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        argv += ["--platform", platform]
    return argv + ["--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), *map(str, pins)]


def download(pins: Sequence[Pin], cache: Path, python_version: str = PYTHON_VERSION,
             platforms: Sequence[str] = PLATFORMS) -> dict[Pin, Path]:
    """Each pin's wheel, from the cache or downloaded into it (one pip call for all that are missing)."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pins if not cached_wheels(p, cache)]
    if missing:
        print(f"downloading {len(missing)} wheels into {cache}", flush=True)
        p = subprocess.run(pip_download_argv(missing, cache, python_version, platforms),
                           capture_output=True, text=True)
        if p.returncode != 0:
            failed = [pin for pin in missing if not cached_wheels(pin, cache)]
            tail = (p.stderr or p.stdout).strip()[-2000:]
            raise BuildError(f"pip download failed (exit {p.returncode}); still missing: "
                             f"{', '.join(map(str, failed)) or '?'}\n{tail}")
    found: dict[Pin, Path] = {}
    for pin in pins:
        wheels = cached_wheels(pin, cache)
        if len(wheels) != 1:
            raise BuildError(f"{pin}: expected one wheel in {cache}, found "
                             f"{', '.join(w.name for w in wheels) or 'none'}")
        found[pin] = wheels[0]
    return found


# ============================================================================ slimming and re-packing


@dataclass
class Repacked:
    """One wheel as it goes into the wheelhouse."""

    path: Path
    source: str  # the wheel it came from (file name), or the stand-in's source folder
    dropped: list[tuple[str, int]] = field(default_factory=list)  # (member, unpacked bytes)
    roots: frozenset[str] = frozenset()  # top-level paths it installs into a --target dir

    @property
    def name(self) -> str:
        return self.path.name


def _record_name(names: Iterable[str]) -> str:
    records = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(records) != 1:
        raise BuildError(f"expected one *.dist-info/RECORD, found {records or 'none'}")
    return records[0]


def _rewrite_record(data: bytes, dropped: set[str]) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(r for r in rows if r and r[0] not in dropped)
    return buf.getvalue().encode("utf-8")


def install_roots(names: Iterable[str], entry_points: str = "") -> frozenset[str]:
    """What a wheel's members become at the top of a `pip install --target` dir (dist-info included).

    pip installs --target into a temporary home (lib/python → the target, `scripts` and the console
    scripts of `entry_points.txt` → bin/, `headers` → include/, `data/X` → X) and then moves each top-level
    entry into the target, replacing one of the same name when --upgrade is given."""
    roots = set()
    for n in names:
        parts = n.split("/")
        if parts[0].endswith(".data") and len(parts) >= 3:
            kind = parts[1]
            if kind in ("purelib", "platlib", "data"):
                roots.add(parts[2])
            elif kind == "scripts":
                roots.add("bin")
            elif kind == "headers":
                roots.add("include")
        elif parts[0]:
            roots.add(parts[0])
    if re.search(r"^\s*\[(console|gui)_scripts\]", entry_points, re.M):
        roots.add("bin")
    return frozenset(roots)


def _entry_points(z: zipfile.ZipFile, names: Iterable[str]) -> str:
    found = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/entry_points\.txt", n)]
    return z.read(found[0]).decode("utf-8", "replace") if found else ""


def repack_wheel(src: Path, dst: Path, drop: Sequence[str] = (),
                 compression: int = zipfile.ZIP_STORED) -> Repacked:
    """`src` rewritten to `dst`: the members matching `drop` left out and RECORD rewritten without them,
    every other member the same bytes (and mode) under `compression`. Every `drop` pattern must match."""
    with zipfile.ZipFile(src) as zi:
        infos = [i for i in zi.infolist() if not i.is_dir()]
        record = _record_name(i.filename for i in infos)
        dropped = [i for i in infos if any(fnmatch.fnmatchcase(i.filename, pat) for pat in drop)]
        unmatched = [pat for pat in drop if not any(fnmatch.fnmatchcase(i.filename, pat) for i in infos)]
        if unmatched:
            raise BuildError(f"{src.name}: nothing matches {', '.join(unmatched)} (a new layout? see SLIM)")
        if any(i.filename == record for i in dropped):
            raise BuildError(f"{src.name}: a drop pattern matches its RECORD")
        gone = {i.filename for i in dropped}
        tmp = dst.with_name(dst.name + ".part")
        with zipfile.ZipFile(tmp, "w", compression) as zo:
            for info in infos:
                if info.filename in gone:
                    continue
                data = zi.read(info)
                if info.filename == record:
                    data = _rewrite_record(data, gone)
                out = zipfile.ZipInfo(info.filename, info.date_time)
                out.external_attr = info.external_attr
                out.create_system = info.create_system
                out.compress_type = compression
                zo.writestr(out, data)
        os.replace(tmp, dst)
        kept = [i.filename for i in infos if i.filename not in gone]
        return Repacked(dst, src.name, [(i.filename, i.file_size) for i in dropped],
                        install_roots(kept, _entry_points(zi, kept)))


def _record_row(path: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path, f"sha256={digest}", str(len(data))]


def build_standin_wheel(src: Path, out_dir: Path, name: str = STANDIN_NAME,
                        version: str = STANDIN_VERSION) -> Repacked:
    """A pure wheel of the package folder `src/<name>/` (its *.py files), reproducible byte for byte."""
    package = src / name
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    if not files:
        raise BuildError(f"no {name} package with *.py files under {src}")
    dist_info = f"{name}-{version}.dist-info"
    members = [(p.relative_to(src).as_posix(), p.read_bytes()) for p in files]
    members.append((f"{dist_info}/METADATA", (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Dist: pydantic>=2\n"
        f"Summary: stand-in for {name} (the harness repo's real-target kit; --grammar-backend none)\n").encode()))
    members.append((f"{dist_info}/WHEEL", (
        b"Wheel-Version: 1.0\nGenerator: harness build_wheelhouse.py\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n")))
    rows = [_record_row(path, data) for path, data in members] + [[f"{dist_info}/RECORD", "", ""]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    members.append((f"{dist_info}/RECORD", buf.getvalue().encode()))
    dst = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for path, data in members:
            info = zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            zo.writestr(info, data)
    return Repacked(dst, f"{src.name}/{name}", [], install_roots(p for p, _ in members))


# ============================================================================ parts


@dataclass(frozen=True)
class Item:
    name: str
    size: int  # bytes, estimated in the part
    roots: frozenset[str] = frozenset()


# Top-level folders that install_wheelhouse.sh merges across calls instead of letting pip replace them: bin/
# is shared by every wheel with scripts, so it does not tie those wheels to one part.
MERGED_ROOTS = frozenset({"bin"})


def group_items(items: Sequence[Item]) -> list[list[Item]]:
    """Items that share an install root other than MERGED_ROOTS (transitively) in one group; the rest alone."""
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, item in enumerate(items):
        for root in item.roots - MERGED_ROOTS:
            if root in owner:
                parent[find(i)] = find(owner[root])
            else:
                owner[root] = i
    groups: dict[int, list[Item]] = {}
    for i, item in enumerate(items):
        groups.setdefault(find(i), []).append(item)
    return list(groups.values())


def plan_parts(items: Sequence[Item], limit: int) -> list[list[str]]:
    """Item names in as few parts as the sizes allow (each part's total <= limit), balanced, with each group
    of `group_items` whole in one part. Worst fit decreasing: each group, largest first, goes to the
    least-filled part; when it fits nowhere, one part more and start again."""
    if len({i.name for i in items}) != len(items):
        raise BuildError("two wheels of the same file name")
    groups = sorted(group_items(items), key=lambda g: (-sum(i.size for i in g), min(i.name for i in g)))
    for g in groups:
        if sum(i.size for i in g) > limit:
            names = ", ".join(i.name for i in g)
            raise BuildError(f"{names}: {sum(i.size for i in g) / MiB:.1f} MiB, more than one part "
                             f"({limit / MiB:.1f} MiB) holds")
    total = sum(i.size for i in items)
    n = max(1, math.ceil(total / limit))
    while True:
        parts: list[list[Item]] = [[] for _ in range(n)]
        loads = [0] * n
        for g in groups:
            j = min(range(n), key=lambda k: (loads[k], k))
            size = sum(i.size for i in g)
            if loads[j] + size > limit:
                break
            parts[j].extend(g)
            loads[j] += size
        else:
            return [sorted(i.name for i in part) for part in parts if part]
        n += 1


def xz_size(path: Path, preset: int) -> int:
    """Bytes of `path` as one xz stream at `preset` (the estimate of its share of a part)."""
    comp = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=preset)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            size += len(comp.compress(chunk))
    return size + len(comp.flush())


def xz_filters(preset: int) -> list[dict]:
    """x86 BCJ, then LZMA2 at `preset`; at 9 its extreme variant with a 192 MiB window.

    Measured on this wheelhouse's parts (~200 MB of stored wheels each, much of it x86-64 shared objects):
    BCJ saves 1.5 % over plain level 9, the extreme level with a window that spans the whole part 0.8 %
    more (compressing then takes ~2 GB of memory; unpacking, 192 MiB)."""
    lz: dict = {"id": lzma.FILTER_LZMA2, "preset": preset}
    if preset == 9:
        lz.update(preset=9 | lzma.PRESET_EXTREME, dict_size=192 * MiB)
    return [{"id": lzma.FILTER_X86}, lz]


def write_part_tarball(wheels: Sequence[Path], dst: Path, preset: int) -> int:
    """A reproducible solid .tar.xz of the wheels (flat names, sorted; no owner, fixed times); its size."""
    tmp = dst.with_name(dst.name + ".part")
    with lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=xz_filters(preset)) as xz, \
            tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in sorted(wheels, key=lambda p: p.name):
            info = tarfile.TarInfo(wheel.name)
            info.size = wheel.stat().st_size
            info.mode, info.mtime = 0o644, 0
            with open(wheel, "rb") as f:
                tar.addfile(info, f)
    os.replace(tmp, dst)
    return dst.stat().st_size


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _starmap(fn, args: Sequence[tuple], jobs: int) -> list:
    """fn(*a) for each a, in `jobs` processes (in this one when jobs is 1): xz is CPU-bound."""
    if jobs <= 1 or len(args) <= 1:
        return [fn(*a) for a in args]
    with concurrent.futures.ProcessPoolExecutor(min(jobs, len(args))) as pool:
        return list(pool.map(fn, *zip(*args)))


def _part_name(i: int, n: int) -> str:
    return f"part{i}of{n}"


def make_parts(wheels: Sequence[Repacked], out: Path, limit: int, preset: int, estimate_preset: int,
               label: str, jobs: int) -> list[dict]:
    """The wheels packed into part folders under `out` (each <= limit bytes); returns what each holds."""
    by_name = {w.name: w for w in wheels}
    sizes = dict(zip(by_name, _starmap(xz_size, [(w.path, estimate_preset) for w in wheels], jobs)))
    items = [Item(w.name, sizes[w.name] + 1024, w.roots) for w in wheels]  # + tar header and padding
    margin = 64 * 1024  # the manifest file
    budget = limit - margin
    for _attempt in range(6):
        plan = plan_parts(items, budget)
        n = len(plan)
        staged = out / ".parts-in-progress"
        shutil.rmtree(staged, ignore_errors=True)
        tasks = []
        for i, names in enumerate(plan, 1):
            folder = staged / _part_name(i, n)
            folder.mkdir(parents=True)
            tarball = folder / f"{label}-{_part_name(i, n)}.tar.xz"
            tasks.append(([by_name[x].path for x in names], tarball, preset))
        _starmap(write_part_tarball, tasks, jobs)
        parts = []
        for i, names in enumerate(plan, 1):
            folder = staged / _part_name(i, n)
            manifest = folder / f"{label}-{_part_name(i, n)}.sha256"
            manifest.write_text("".join(f"{sha256_file(by_name[x].path)}  {x}\n" for x in names))
            keep = [x for x in names if wheel_name_version(x)[0] in NOT_INSTALLED]
            if keep:  # install_wheelhouse.sh copies these aside instead of installing them
                (folder / f"{label}-{_part_name(i, n)}.keep").write_text("".join(f"{x}\n" for x in keep))
            parts.append(dict(name=_part_name(i, n), bytes=folder_size(folder), wheels=names))
        worst = max(p["bytes"] for p in parts)
        if worst <= limit:
            for p in parts:
                os.replace(staged / p["name"], out / p["name"])
            staged.rmdir()
            return parts
        # The estimate was low (it should not be: each wheel alone compresses worse than in a solid
        # stream at a higher preset): plan again with a smaller budget.
        print(f"a part came out at {worst / MiB:.1f} MiB (> {limit / MiB:.1f}); planning again", flush=True)
        budget = int(budget * limit / worst * 0.97)
    raise BuildError("could not keep every part under the limit")


# ============================================================================ main


def build(req_file: Path, out: Path, cache: Path, limit: int, preset: int = 9, estimate_preset: int = 1,
          python_version: str = PYTHON_VERSION, platforms: Sequence[str] = PLATFORMS,
          jobs: int | None = None) -> dict:
    reqs = parse_requirements(req_file.read_text())
    wheels = download(reqs.pins, cache, python_version, platforms)
    jobs = jobs or max(1, os.cpu_count() or 1)
    out.mkdir(parents=True, exist_ok=True)
    old = out / "wheelhouse.json"
    if old.exists():  # a previous build's parts go first; nothing else in `out` is touched
        for part in json.loads(old.read_text()).get("parts", []):
            shutil.rmtree(out / part["name"], ignore_errors=True)
        old.unlink()
    sglang = next((p for p in reqs.pins if p.key == "sglang"), None)
    label = f"sglang-{sglang.version}-wheelhouse" if sglang else "wheelhouse"
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        staging = Path(tmp)
        repacked: list[Repacked] = []
        for pin, src in wheels.items():
            repacked.append(repack_wheel(src, staging / src.name, SLIM.get(pin.key, ())))
        repacked.append(build_standin_wheel(STANDIN_SRC, staging))
        parts = make_parts(repacked, out, limit, preset, estimate_preset, label, jobs)
        summary = dict(
            requirements=req_file.name, python_version=python_version, platforms=list(platforms),
            part_limit_bytes=limit, xz_preset=preset, not_installed=sorted(NOT_INSTALLED),
            skipped=[str(p) for p in reqs.skipped],
            parts=parts,
            wheels={w.name: dict(source=w.source, bytes=w.path.stat().st_size,
                                 dropped=[dict(member=m, bytes=b) for m, b in w.dropped])
                    for w in repacked},
        )
    (out / "wheelhouse.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--out", type=Path, required=True, help="where the part folders go (made if missing)")
    ap.add_argument("--part-mib", type=float, default=55, help="the most MiB one part folder may hold (55)")
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/harness-real-target").expanduser(),
                    help="downloaded wheels, kept between runs (a subfolder per Python version and platforms)")
    ap.add_argument("--requirements", type=Path, default=DEFAULT_REQUIREMENTS)
    ap.add_argument("--python-version", default=PYTHON_VERSION, help="the GPU host's Python (3.12)")
    ap.add_argument("--platform", action="append", default=None,
                    help=f"a pip --platform tag (repeatable; default: {' '.join(PLATFORMS)})")
    ap.add_argument("--xz-preset", type=int, default=9, choices=range(10),
                    help="xz level of the parts (9: its extreme variant, a 192 MiB window; see xz_filters)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compressors (default: CPU count)")
    args = ap.parse_args(argv)
    platforms = args.platform or PLATFORMS
    cache = cache_folder(args.cache, args.python_version, platforms)
    try:
        summary = build(args.requirements, args.out, cache, int(args.part_mib * MiB), args.xz_preset,
                        python_version=args.python_version, platforms=platforms, jobs=args.jobs)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for w, info in summary["wheels"].items():
        if info["dropped"]:
            gone = sum(d["bytes"] for d in info["dropped"])
            print(f"slimmed {w}: dropped {len(info['dropped'])} files, {gone / MiB:.0f} MiB unpacked")
    total = sum(p["bytes"] for p in summary["parts"])
    for p in summary["parts"]:
        print(f"{args.out / p['name']}: {p['bytes'] / MiB:.1f} MiB, {len(p['wheels'])} wheels")
    print(f"{len(summary['parts'])} parts, {total / MiB:.1f} MiB in all "
          f"({len(summary['wheels'])} wheels; {len(summary['skipped'])} pins skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
