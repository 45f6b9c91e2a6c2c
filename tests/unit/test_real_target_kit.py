"""The real-target kit (real-target/): requirements parsing, wheel slimming, part planning and packing, and
the offline install of the parts — on small fake wheels, no network."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import random
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import kit

bw = kit.load("build_wheelhouse")
INSTALL = kit.KIT / "install_wheelhouse.sh"


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], modes: dict[str, int] | None = None,
               tag: str = "py3-none-any") -> Path:
    """A wheel pip accepts: the files, METADATA, WHEEL and a RECORD with every file's hash."""
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members[f"{dist_info}/RECORD"] = buf.getvalue().encode()
    wheel = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in members.items():
            info = zipfile.ZipInfo(path, (2024, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (modes or {}).get(path, 0o644)) << 16  # as real wheels set it
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel


def pip_install(wheels: list[Path], target: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)],
                       capture_output=True, text=True, env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})
    assert p.returncode == 0, p.stderr


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


# ============================================================================ requirements


def test_requirements_leave_skip_lines_out_and_keep_pins():
    text = """# a comment line, and an empty one:

sglang==0.5.16
helion==0.2.6   #skip: one model only
pydantic-core==2.50.5   # a comment that is not a skip
nvidia-cuda-nvcc==13.5.37 # skip: the image has nvcc
Partial_JSON.Parser == 0.2.1.1.post7
tokenspeed-triton==3.9.10.post20261028   #skip
"""
    reqs = bw.parse_requirements(text)
    assert [str(p) for p in reqs.pins] == ["sglang==0.5.16", "pydantic-core==2.50.5",
                                           "Partial_JSON.Parser==0.2.1.1.post7"]
    assert [str(p) for p in reqs.skipped] == ["helion==0.2.6", "nvidia-cuda-nvcc==13.5.37",
                                              "tokenspeed-triton==3.9.10.post20261028"]
    assert [p.line for p in reqs.pins] == [3, 5, 7]
    assert reqs.pins[2].key == "partial_json_parser"  # as wheel file names spell it


@pytest.mark.parametrize("line, problem", [
    ("torch>=2.11", "is not a 'name==version' pin"),
    ("sglang[all]==0.5.16", "is not a 'name==version' pin"),
    ("sglang==0.5.16\nSGLang==0.5.17", "pinned already on line 1"),
])
def test_requirements_refuse_what_is_not_one_exact_pin(line, problem):
    with pytest.raises(bw.BuildError, match=problem):
        bw.parse_requirements(line)


def test_the_kits_requirements_file():
    """Its pins are the shared list's lines without '#skip' (counted here by plain text); xgrammar skipped."""
    text = bw.DEFAULT_REQUIREMENTS.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reqs = bw.parse_requirements(text)
    assert len(reqs.pins) == sum("#skip" not in ln for ln in lines)
    assert len(reqs.skipped) == sum("#skip" in ln for ln in lines)
    pins = {str(p) for p in reqs.pins}
    assert {"sglang==0.5.16", "sglang-kernel==0.4.5", "transformers==5.12.1", "tokenizers==0.22.2",
            "flashinfer-python==0.6.14", "ipython==9.18.1"} <= pins
    assert "ijson==3.4.0" in pins  # the harness's own: without it a live record cannot summarise its profile
    assert {p.key for p in reqs.skipped} >= {"xgrammar", "sgl_deep_gemm", "flash_attn_4", "tilelang"}
    assert not {p.key for p in reqs.pins} & {"torch", "triton", "numpy"}  # the image's own


def test_pip_download_asks_for_the_gpu_hosts_wheels(tmp_path):
    pins = bw.parse_requirements("sglang==0.5.16\nllguidance==1.9.1\n").pins
    argv = bw.pip_download_argv(pins, tmp_path)
    assert argv[:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert argv[argv.index("--implementation") + 1] == "cp"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    # pip prefers wheels in this order: the usual tags first, the newer glibc ones only where nothing else exists
    assert platforms[:5] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                             "manylinux2014_x86_64", "manylinux1_x86_64"]
    assert {"manylinux_2_31_x86_64", "manylinux_2_34_x86_64"} <= set(platforms[5:])
    assert argv[-2:] == ["sglang==0.5.16", "llguidance==1.9.1"]


def test_the_cache_has_a_folder_per_python_and_platform_order(tmp_path):
    a = bw.cache_folder(tmp_path, "3.12", ["manylinux_2_28_x86_64", "manylinux_2_34_x86_64"])
    assert a == bw.cache_folder(tmp_path, "3.12", ["manylinux_2_28_x86_64", "manylinux_2_34_x86_64"])
    assert a.parent == tmp_path and a.name.startswith("cp312-")
    assert a != bw.cache_folder(tmp_path, "3.12", ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64"])
    assert a != bw.cache_folder(tmp_path, "3.11", ["manylinux_2_28_x86_64", "manylinux_2_34_x86_64"])


def test_download_takes_cached_wheels_without_pip(tmp_path, monkeypatch):
    make_wheel(tmp_path, "partial_json_parser", "0.2.1.1.post7", {"partial_json_parser/__init__.py": b""})
    monkeypatch.setattr(bw.subprocess, "run", lambda *a, **k: pytest.fail("pip was called"))
    pins = bw.parse_requirements("partial-json-parser==0.2.1.1.post7\n").pins
    found = bw.download(pins, tmp_path)
    assert found[pins[0]].name == "partial_json_parser-0.2.1.1.post7-py3-none-any.whl"


# ============================================================================ slimming


KERNEL_FILES = {
    "sgl_kernel/__init__.py": b"# sgl_kernel\n",
    "sgl_kernel/flash_attn.py": b"# imports flash_ops lazily\n",
    "sgl_kernel/flash_ops.abi3.so": b"\x7fELF fa3" * 1000,
    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": b"\x7fELF infllm" * 100,
    "sgl_kernel/infllm_v2/__init__.py": b"# stays: only the compiled ops go\n",
    "sgl_kernel/sm100/common_ops.abi3.so": b"\x7fELF sm100" * 100,
    "sgl_kernel/sm100/__init__.py": b"",
    "sgl_kernel/sm90/common_ops.abi3.so": b"\x7fELF sm90" * 100,
    "sgl_kernel/flashmla_ops.abi3.so": b"\x7fELF flashmla" * 100,
    "triton_kernels/__init__.py": b"",
}
DROPPED = {"sgl_kernel/flash_ops.abi3.so", "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",
           "sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm100/__init__.py"}
EXEC = 0o755


@pytest.fixture
def kernel_wheel(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    modes = {n: EXEC for n in KERNEL_FILES if n.endswith(".so")}
    return make_wheel(tmp_path / "src", "sglang_kernel", "0.4.5", KERNEL_FILES, modes)


def test_slimming_drops_the_fa3_infllm_and_sm100_files_and_keeps_the_rest(kernel_wheel, tmp_path):
    out = tmp_path / kernel_wheel.name
    result = bw.repack_wheel(kernel_wheel, out, bw.SLIM["sglang_kernel"])
    assert {m for m, _ in result.dropped} == DROPPED
    assert sum(b for _, b in result.dropped) == sum(len(KERNEL_FILES[m]) for m in DROPPED)
    with zipfile.ZipFile(out) as z, zipfile.ZipFile(kernel_wheel) as orig:
        names = set(z.namelist())
        kept = set(KERNEL_FILES) - DROPPED
        assert not names & DROPPED
        assert kept <= names
        for n in names:  # every member the same bytes and mode, except RECORD
            if not n.endswith("RECORD"):
                assert z.read(n) == orig.read(n), n
                assert z.getinfo(n).external_attr == orig.getinfo(n).external_attr, n
            assert z.getinfo(n).compress_type == zipfile.ZIP_STORED  # for the solid xz of the part
        record = [row[0] for row in csv.reader(io.StringIO(z.read("sglang_kernel-0.4.5.dist-info/RECORD").decode()))]
    assert set(record) == names  # RECORD lists exactly what is in the wheel, dropped files gone
    assert result.roots == {"sgl_kernel", "triton_kernels", "sglang_kernel-0.4.5.dist-info"}


def test_a_slimmed_wheel_installs_with_pip(kernel_wheel, tmp_path):
    out = tmp_path / kernel_wheel.name
    bw.repack_wheel(kernel_wheel, out, bw.SLIM["sglang_kernel"])
    target = tmp_path / "site"
    pip_install([out], target)
    installed = files_under(target)
    assert {n for n in installed if not n.startswith("sglang_kernel-")} == set(KERNEL_FILES) - DROPPED
    for n in set(KERNEL_FILES) - DROPPED:
        assert (target / n).read_bytes() == KERNEL_FILES[n]
    assert os.access(target / "sgl_kernel/sm90/common_ops.abi3.so", os.X_OK)


def test_a_drop_pattern_that_matches_nothing_fails_the_build(kernel_wheel, tmp_path):
    with pytest.raises(bw.BuildError, match=r"nothing matches sgl_kernel/sm120/\*"):
        bw.repack_wheel(kernel_wheel, tmp_path / kernel_wheel.name, ("sgl_kernel/sm100/*", "sgl_kernel/sm120/*"))
    assert not (tmp_path / kernel_wheel.name).exists()


def test_the_xgrammar_stand_in_wheel_installs_and_covers_what_sglang_imports(tmp_path):
    wheel = bw.build_standin_wheel(bw.STANDIN_SRC, tmp_path)
    assert wheel.name == "xgrammar-0.0.0+standin-py3-none-any.whl"
    (tmp_path / "again").mkdir()
    again = bw.build_standin_wheel(bw.STANDIN_SRC, tmp_path / "again")
    assert again.path.read_bytes() == wheel.path.read_bytes()  # reproducible: same manifest every build
    target = tmp_path / "site"
    pip_install([wheel.path], target)
    code = """
import xgrammar
from xgrammar import StructuralTag            # sglang/srt/function_call/inkling_detector.py (module level)
import pydantic
assert issubclass(StructuralTag, pydantic.BaseModel)   # protocol.py puts it in a pydantic Union
tag = StructuralTag.model_validate({"type": "structural_tag", "format": {"type": "token_triggered_tags", "tags": []}})
assert tag.format["type"] == "token_triggered_tags"
try:
    from xgrammar import StructuralTag, get_model_structural_tag   # base_format_detector.py: try/except ImportError
except ImportError:
    print("fallback")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "fallback"


# ============================================================================ parts


def test_install_roots_follow_pips_target_layout():
    names = ["a/__init__.py", "a-1.dist-info/RECORD", "top.py", "a-1.data/scripts/tool",
             "a-1.data/purelib/b/__init__.py", "a-1.data/data/share/x", "a-1.data/headers/a.h"]
    assert bw.install_roots(names) == {"a", "a-1.dist-info", "top.py", "bin", "b", "share", "include"}
    # console scripts from entry points land in bin/ too; other entry point groups do not
    assert bw.install_roots(["a/__init__.py"], "[console_scripts]\na = a:main\n") == {"a", "bin"}
    assert bw.install_roots(["a/__init__.py"], "[pytest11]\na = a.plugin\n") == {"a"}


def check_plan(items, limit, plan):
    sizes = {i.name: i.size for i in items}
    flat = [n for part in plan for n in part]
    assert sorted(flat) == sorted(sizes)  # every wheel in exactly one part
    assert all(sum(sizes[n] for n in part) <= limit for part in plan)  # no part over the limit
    where = {n: k for k, part in enumerate(plan) for n in part}
    for group in bw.group_items(items):  # wheels sharing an install root together
        assert len({where[i.name] for i in group}) == 1


def test_plan_parts_fills_as_few_parts_as_the_sizes_allow():
    items = [bw.Item(f"w{i}.whl", s) for i, s in enumerate([40, 30, 20, 10, 5, 5])]  # 110 in all
    plan = bw.plan_parts(items, 55)
    check_plan(items, 55, plan)
    assert len(plan) == 2


def test_plan_parts_keeps_wheels_that_share_a_root_together():
    items = [bw.Item("a.whl", 20, frozenset({"a", "share"})), bw.Item("b.whl", 20, frozenset({"share"})),
             bw.Item("big.whl", 30), bw.Item("cutlass_base.whl", 15, frozenset({"nvidia_cutlass_dsl"})),
             bw.Item("cutlass_core.whl", 15, frozenset({"nvidia_cutlass_dsl"}))]
    plan = bw.plan_parts(items, 55)
    check_plan(items, 55, plan)
    assert any({"a.whl", "b.whl"} <= set(p) for p in plan)
    assert any({"cutlass_base.whl", "cutlass_core.whl"} <= set(p) for p in plan)


def test_bin_does_not_tie_wheels_together():
    """install_wheelhouse.sh merges bin/, so two wheels with scripts may go to different parts."""
    items = [bw.Item("dill.whl", 40, frozenset({"dill", "bin"})), bw.Item("py_spy.whl", 40, frozenset({"bin"}))]
    plan = bw.plan_parts(items, 55)
    assert sorted(plan) == [["dill.whl"], ["py_spy.whl"]]


def test_plan_parts_refuses_a_group_larger_than_a_part():
    items = [bw.Item("a.whl", 30, frozenset({"ns"})), bw.Item("b.whl", 30, frozenset({"ns"}))]
    with pytest.raises(bw.BuildError, match="more than one part"):
        bw.plan_parts(items, 55)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 100), min_size=1, max_size=40),
       roots=st.lists(st.sampled_from(["", "bin", "ns", "share"]), min_size=40, max_size=40),
       limit=st.integers(100, 300))
def test_plan_parts_never_overfills_and_places_every_wheel_once(sizes, roots, limit):
    items = [bw.Item(f"w{i}.whl", s, frozenset({roots[i]} - {""})) for i, s in enumerate(sizes)]
    try:
        plan = bw.plan_parts(items, limit)
    except bw.BuildError:  # only when a group of shared roots is larger than a part
        assert any(sum(i.size for i in g) > limit for g in bw.group_items(items))
        return
    check_plan(items, limit, plan)


def random_wheels(folder: Path, count: int, size: int, seed: int = 0) -> list:
    """Wheels of incompressible bytes (xz cannot shrink them: the part sizes are predictable)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        w = make_wheel(folder, f"pkg{i}", "1.0", {f"pkg{i}/data.bin": rng.randbytes(size)})
        stored = folder / "stored" / w.name
        stored.parent.mkdir(exist_ok=True)
        out.append(bw.repack_wheel(w, stored))
    return out


def test_make_parts_writes_parts_under_the_limit_holding_every_wheel_once(tmp_path):
    wheels = random_wheels(tmp_path, 7, 100 * 1024)  # 700 KiB that xz cannot shrink
    out = tmp_path / "out"
    out.mkdir()
    limit = 384 * 1024  # 3 wheels a part, with room for the manifest
    parts = bw.make_parts(wheels, out, limit, preset=1, estimate_preset=0, label="wh", jobs=1)
    assert len(parts) == 3
    seen = []
    for part in parts:
        folder = out / part["name"]
        assert bw.folder_size(folder) == part["bytes"] <= limit
        tarball, = folder.glob("*.tar.xz")
        with tarfile.open(tarball) as tar:
            names = sorted(tar.getnames())
        manifest = [line.split("  ")[1] for line in (folder / f"wh-{part['name']}.sha256").read_text().splitlines()]
        assert names == sorted(manifest) == sorted(part["wheels"])
        seen += names
    assert sorted(seen) == sorted(w.name for w in wheels)
    assert {p.name for p in out.iterdir()} == {p["name"] for p in parts}  # no staging left behind


def test_the_parts_install_offline_one_call_after_another(tmp_path):
    """Parts installed by install_wheelhouse.sh one call each: a later call does not replace what an earlier
    one put there (bin/ included); sglang's wheel is kept aside, not installed; a tampered part is refused."""
    src = tmp_path / "src"
    src.mkdir()
    blob = random.Random(7).randbytes(120 * 1024)  # one wheel with it fills a part: the script wheels part ways
    built = [
        make_wheel(src, "dill", "0.4.1", {"dill/__init__.py": b"d", "dill/blob": blob,
                                          "dill-0.4.1.data/scripts/undill": b"#!python\n"}),
        make_wheel(src, "py_spy", "0.4.3", {"py_spy-0.4.3.data/scripts/py-spy": b"\x7fELF", "py_spy/blob": blob}),
        make_wheel(src, "clitool", "1.0", {"clitool/__init__.py": b"def main():\n    pass\n", "clitool/blob": blob,
                                           "clitool-1.0.dist-info/entry_points.txt": b"[console_scripts]\nclitool = clitool:main\n"}),
        make_wheel(src, "cutlass_base", "4.6.0", {"nvidia_cutlass_dsl/base/__init__.py": b"b"}),
        make_wheel(src, "cutlass_core", "4.6.0", {"nvidia_cutlass_dsl/core/__init__.py": b"c"}),
        make_wheel(src, "sglang", "0.5.16", {"sglang/__init__.py": b"s", "sglang/srt/x.py": b"x"}),
    ] + [make_wheel(src, f"filler{i}", "1.0", {f"filler{i}/blob": random.Random(i).randbytes(80 * 1024)})
         for i in range(4)]
    stored = tmp_path / "stored"
    stored.mkdir()
    wheels = [bw.repack_wheel(w, stored / w.name) for w in built]
    out = tmp_path / "out"
    out.mkdir()
    parts = bw.make_parts(wheels, out, 256 * 1024, preset=1, estimate_preset=0, label="wh", jobs=1)
    where = {w: k for k, part in enumerate(parts) for w in part["wheels"]}
    scripts = ["dill-0.4.1-py3-none-any.whl", "py_spy-0.4.3-py3-none-any.whl", "clitool-1.0-py3-none-any.whl"]
    assert len({where[w] for w in scripts}) == 3  # three parts write bin/
    assert where["cutlass_base-4.6.0-py3-none-any.whl"] == where["cutlass_core-4.6.0-py3-none-any.whl"]
    target = tmp_path / "site"
    env = {**os.environ, "PYTHON": sys.executable}
    for part in parts:
        p = subprocess.run(["bash", str(INSTALL), str(out / part["name"]), "--target", str(target)],
                           capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
    installed = files_under(target)
    assert {"bin/undill", "bin/py-spy", "bin/clitool", "nvidia_cutlass_dsl/base/__init__.py",
            "nvidia_cutlass_dsl/core/__init__.py", "dill/__init__.py", "clitool/__init__.py"} <= installed
    assert {f"filler{i}/blob" for i in range(4)} <= installed
    assert not any(n.startswith("sglang") for n in installed)
    assert files_under(tmp_path / "site.wheels") == {"sglang-0.5.16-py3-none-any.whl"}

    # A part whose wheel does not match its manifest is refused before anything is installed.
    part = out / parts[0]["name"]
    tarball, = part.glob("*.tar.xz")
    with tarfile.open(tarball) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    flipped = bytearray(members[0][1])
    flipped[len(flipped) // 2] ^= 1  # one bit, same size
    members[0] = (members[0][0], bytes(flipped))
    with tarfile.open(tarball, "w:xz") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data))
    p = subprocess.run(["bash", str(INSTALL), str(part), "--target", str(tmp_path / "site2")],
                       capture_output=True, text=True, env=env)
    assert p.returncode != 0
    assert "FAILED" in p.stdout + p.stderr
    assert not (tmp_path / "site2").exists()


def test_one_wheel_laid_out_twice_gives_one_base_commit(tmp_path):
    """One target repo per GPU: their results are comparable only if they share the base commit (the first
    two-GPU sweep called them "not comparable": each `git commit` had stamped its own time)."""
    wheel = make_wheel(tmp_path, "sglang", "0.5.16", {"sglang/__init__.py": b"__version__ = '0.5.16'\n",
                                                      "sglang/srt/x.py": b"X = 1\n"})
    target = kit.load("make_target_repo")
    heads = []
    for name in ("gpu0", "gpu1"):
        repo = target.lay_out(wheel, tmp_path / name)
        heads.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip())
    assert heads[0] == heads[1] and len(heads[0]) == 40
    date = subprocess.run(["git", "-C", str(tmp_path / "gpu0"), "log", "-1", "--format=%aI %cI"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert date == ["2024-01-01T00:00:00+00:00"] * 2  # the wheel's own timestamp, not the clock's
