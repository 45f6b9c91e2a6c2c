"""The scheduler's torch profiler: SGLang's SchedulerProfilerManager (0.5.16 and 0.5.23 alike), same rules.

- ``/start_profile`` without ``start_step`` or ``profile_by_stage`` starts the profiler at once, inside the
  request; with them it only arms it: it starts at forward step ``max(start_step, forward_ct + 1)``.
- ``num_steps``: the profiler is stopped at the start of the forward step after the last one recorded
  (``target = forward_ct + num_steps + 1``, or ``start + num_steps``) -- only when a batch runs, so an idle
  server never writes its traces. ``/stop_profile`` stops it at once.
- A second ``/start_profile`` while one runs fails (500), and without ``start_step`` it also loses the
  running profile's trace.
- Stop: ``Stop profiling[-STAGE]...``, then the profiler's stop and the export (the scheduler serves nothing
  meanwhile), then ``Profiling done. Traces are saved to: <dir>``. One file per rank:
  ``[<prefix>-]<profile_id>-TP-<rank>[-DP-<dp>][-EXTEND|-DECODE].trace.json.gz``.
- With Python stacks (SGLang's default) and CPU activity, the real profiler's Python tracer records the
  scheduler's busy idle loop: every idle second it ran through costs about a minute of stop and export
  (measured on an H200: 0.5 s idle -> 5.9 s stop + 22 s export). The simulation sleeps that long.
"""

import logging
import os
import pickle
import time

from sglang._sim import profile_export_s
from sglang._sim.profiler import PYTHON_TRACER_S_PER_IDLE_S

logger = logging.getLogger(__name__)


class SchedulerProfilerManager(object):
    def __init__(self, tp_size, dp_rank, dp_size, get_forward_ct, new_recorder):
        self.tp_size = tp_size
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.get_forward_ct = get_forward_ct
        self.new_recorder = new_recorder  # (output_dir) -> Recorder
        self.recorder = None
        self.torch_profiler_output_dir = None
        self.profiler_activities = None
        self.profile_id = None
        self.profile_prefix = ""
        self.with_stack = True
        self.profiler_start_forward_ct = None
        self.profiler_target_forward_ct = None
        self.profiler_prefill_ct = None
        self.profiler_decode_ct = None
        self.profiler_target_prefill_ct = None
        self.profiler_target_decode_ct = None
        self.profile_by_stage = False
        self.profile_in_progress = False
        self.idle_traced_s = 0.0

    # ------------------------------------------------------------- requests

    def profile(self, req):
        """A ProfileReq (dict) -> (success, message), as ProfileReqOutput."""
        if req.get("req_type") == "stop":
            return self._stop_profile()
        if req.get("profile_by_stage") or req.get("start_step"):
            return self._init_profile(req)
        self._init_profile(req)
        return self._start_profile()

    def _init_profile(self, req):
        if self.profile_in_progress:
            return False, "Profiling is already in progress. Call /stop_profile first."
        self.profile_by_stage = bool(req.get("profile_by_stage"))
        output_dir = req.get("output_dir")
        if output_dir is None:
            output_dir = os.getenv("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        activities = req.get("activities")
        if activities is None:
            activities = ["CPU", "GPU"]
        self.torch_profiler_output_dir = os.path.expanduser(output_dir)
        self.with_stack = req.get("with_stack")
        self.profiler_activities = activities
        self.profile_id = req.get("profile_id")
        self.profile_prefix = req.get("profile_prefix") or ""
        start_step, num_steps = req.get("start_step"), req.get("num_steps")
        if start_step:
            self.profiler_start_forward_ct = max(start_step, self.get_forward_ct() + 1)
        if num_steps:
            if self.profile_by_stage:
                self.profiler_prefill_ct = 0
                self.profiler_decode_ct = 0
                self.profiler_target_prefill_ct = num_steps
                self.profiler_target_decode_ct = num_steps
            elif start_step:
                self.profiler_target_forward_ct = self.profiler_start_forward_ct + num_steps
            else:
                self.profiler_target_forward_ct = self.get_forward_ct() + num_steps + 1
        else:
            self.profiler_target_forward_ct = None
        return True, "Succeeded"

    def _start_profile(self, stage=None):
        stage_str = " for %s" % stage.upper() if stage else ""
        logger.info(
            "Profiling starts%s. Traces will be saved to: %s (with profile id: %s)"
            % (stage_str, self.torch_profiler_output_dir, self.profile_id)
        )
        if any(a in ("CPU", "GPU") for a in self.profiler_activities):
            if self.recorder is not None:
                # A second immediate start while one runs: _profile ignores _init_profile's refusal, torch's
                # start raises, and SGLang drops its handle (torch_profiler = None) -- that profile's trace is
                # never written, though profile_in_progress stays set.
                self.recorder = None
                return False, "Profiler is already enabled on this thread"
            self.recorder = self.new_recorder()
            self.idle_traced_s = 0.0
            self.profile_in_progress = True
        if "MEM" in self.profiler_activities:
            self.profile_in_progress = True
        return True, "Succeeded"

    def _stop_profile(self, stage=None):
        if not self.profile_in_progress:
            return False, "Profiling is not in progress. Call /start_profile first."
        if not os.path.isdir(self.torch_profiler_output_dir):
            os.makedirs(self.torch_profiler_output_dir)
        stage_prefix = self.profile_prefix + "-" if self.profile_prefix else ""
        stage_suffix = "-%s" % stage.upper() if stage else ""
        logger.info("Stop profiling" + stage_suffix + "...")
        if self.recorder is not None:
            python_tracer = self.with_stack and "CPU" in self.profiler_activities
            slow = PYTHON_TRACER_S_PER_IDLE_S * self.idle_traced_s if python_tracer else 0.0
            time.sleep(slow + profile_export_s())  # the profiler's stop and the export: nothing else runs
            names = {}
            for rank in range(self.tp_size):
                parts = [self.profile_id, "TP-%d" % rank]
                if self.dp_size > 1:
                    parts.append("DP-%d" % self.dp_rank)
                names[rank] = stage_prefix + "-".join(parts) + stage_suffix + ".trace.json.gz"
            self.recorder.write(self.torch_profiler_output_dir, names)
        if "MEM" in self.profiler_activities:
            for rank in range(self.tp_size):
                path = os.path.join(self.torch_profiler_output_dir, "%s%s-TP-%d-memory%s.pickle"
                                    % (stage_prefix, time.time(), rank, stage_suffix))
                with open(path, "wb") as f:
                    pickle.dump({"segments": [], "device_traces": []}, f)
        logger.info("Profiling done. Traces are saved to: %s" % self.torch_profiler_output_dir)
        self.recorder = None
        self.profile_in_progress = False
        self.profiler_start_forward_ct = None
        return True, "Succeeded."

    # ------------------------------------------------------------- the scheduler loop

    def on_idle(self, seconds):
        """The scheduler had no batch for `seconds` (the real one spins through its idle loop meanwhile)."""
        if self.profile_in_progress:
            self.idle_traced_s += seconds

    def on_step(self, mode, batch_size, num_tokens, cost):
        if self.recorder is not None and self.profile_in_progress:
            self.recorder.step(mode, batch_size, num_tokens, cost)

    def profile_batch_predicate(self, mode):
        """At the start of every forward step, after forward_ct was counted up (Scheduler.run_batch)."""
        if self.profile_by_stage:
            if mode == "extend":
                if self.profiler_prefill_ct == 0:
                    self._start_profile("extend")
                self.profiler_prefill_ct += 1
                if self.profiler_prefill_ct > self.profiler_target_prefill_ct:
                    if self.profile_in_progress:
                        self._stop_profile(stage="extend")
            else:
                if self.profiler_decode_ct == 0:
                    if self.profile_in_progress:
                        self._stop_profile(stage="extend")  # force trace flush
                    self._start_profile("decode")
                self.profiler_decode_ct += 1
                if self.profiler_decode_ct > self.profiler_target_decode_ct:
                    if self.profile_in_progress:
                        self._stop_profile(stage="decode")
            return
        if self.profiler_target_forward_ct and self.profiler_target_forward_ct <= self.get_forward_ct():
            self._stop_profile()
        if self.profiler_start_forward_ct and self.profiler_start_forward_ct == self.get_forward_ct():
            self._start_profile()

