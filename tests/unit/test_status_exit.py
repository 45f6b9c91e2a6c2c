"""`harness status` exits 3 when a host cannot take an attempt now: unreachable, its agent could not look, or
processes hold its GPUs' memory (it printed the facts and exited 0 before)."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from harness.cli.app import app
from harness.cli.hosts import HostView, not_ready
from harness.common.protocol import Final, GpuInfo, RepoStatus, Status
from tests.support.sshd import free_port


def test_not_ready_names_an_unreachable_host_a_failed_look_and_held_gpus():
    def look(apps: dict[str, int]) -> Final:
        return Final(status=Status.OK, repo_status=RepoStatus(gpus=[GpuInfo()], gpu_apps=apps))

    assert not_ready(HostView(unreachable="x")) == "unreachable"
    assert "could not look" in (not_ready(HostView(Final(status=Status.INFRA_ERROR))) or "")
    assert not_ready(HostView(look({"4242": 1000}))) == "GPU memory held by pid 4242"
    assert not_ready(HostView(look({}))) is None
    assert not_ready(HostView(look({"1": 1}), queue=[])) is None  # a cluster: the nodes' GPUs


def test_status_of_an_unreachable_host_exits_3_naming_it(tmp_path):
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"gone": {"address": "127.0.0.1", "port": free_port(),
                                                            "user": "root", "repo": "/r", "connect_timeout": 2}}}))
    r = CliRunner().invoke(app, ["status", "--hosts-file", str(inventory)])
    assert r.exit_code == 3, r.output
    assert "gone: unreachable" in r.output
