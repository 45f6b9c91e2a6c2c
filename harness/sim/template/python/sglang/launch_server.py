"""Launch the inference server."""

import logging
import os
import signal
import sys
import warnings

from sglang._sim import hang_after, ignore_sigterm
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils import kill_process_tree


def run_server(server_args):
    """Run the HTTP server (the only mode the simulated target has)."""
    from sglang.srt.entrypoints.http_server import launch_server

    launch_server(server_args)


if __name__ == "__main__":
    if ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but "
        "'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )
    hang_after()  # fail early on a misspelled SGLANG_SIM_HANG_AFTER

    server_args = prepare_server_args(sys.argv[1:])

    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
