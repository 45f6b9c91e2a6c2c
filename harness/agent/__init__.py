"""The remote agent: the host side of one attempt, as a package of small standard-library modules.

The controller ships this package (with `harness/common/protocol.py`) to the host as one content-addressed
zipapp (`harness.hosts.shipping`), starts it with the host's own Python (>= 3.8) over one SSH channel (or as a
local subprocess) and writes the attempt's `Spec` as one JSON line on its stdin. The agent runs the
whole lifecycle next to the server and streams typed events back:

    LOCK → PREFLIGHT → PATCH → LAUNCH → WAIT → BENCH → [PROFILE] → STOP → REVERT → VERIFY → Final

Why here and not on the controller: `waitpid` and the log file are local to the host, so a warmup crash
is seen in milliseconds whatever the SSH latency; and the agent holds a dead man's switch — when its
stdin closes or the heartbeat stops, it stops the server and reverts before exiting. A journal under
`.git/harness/` covers the agent itself being killed: the next agent on that repo recovers first.

Modules, one job each:
    link      JSON lines to the controller, heartbeat, dead man's switch
    attempt   the stage sequence, and nothing else
    lock      one attempt per target repo (flock under .git/harness/)
    tree      git: preflight of the patches, journal, apply, revert, verify
    target    what the host's SGLang and GPUs allow (version, backend choices, arch, GPU count)
    server    launch, log follower, readiness, crash and hang detection, stack dumps, stop
    bench     benchmark clients against the running server
    profiling the profile stage: SGLang's torch profiler around a few steps of a short load (bounded)
    procs     process groups, markers, stragglers, ports
    gpu       nvidia-smi: GPUs, their processes, waiting for memory to be released
    hostio    small file and subprocess helpers
    status    `harness status` and recovery of a journal's server
"""
