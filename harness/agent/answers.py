"""The answer check: a batched greedy POST /generate of fixed prompts, with their top logprobs, before the bench
cases — twice with `prefix_hit`, the second time each prefill a prefix-cache hit (the paged prefill path);
what came back goes to answers.json in the attempt's folder (judged later, by `harness compare`, against the
baseline's: harness/analysis/answers.py).

The request runs in a thread while the server is still watched, as the benchmark clients are: a server that
dies meanwhile is reported as the crash it is. Any other failure (an HTTP error, a reply not in SGLang's
shape, no answer within the bench timeout) is the stage's failure, with the server's reply.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, List, Optional, Tuple

from ..common.protocol import AnswersSpec, Status
from .bench import Load
from .errors import StageFailed
from .procs import TICK_S

ANSWERS_FILE = "answers.json"
FILE_VERSION = 1


def request_body(a: AnswersSpec) -> dict[str, Any]:
    """The one request: every prompt at once, greedy, exactly `output_len` tokens, top-K logprobs of the output."""
    return {"input_ids": a.input_ids,
            "sampling_params": {"temperature": 0, "max_new_tokens": a.output_len, "ignore_eos": True},
            "return_logprob": True, "top_logprobs_num": a.top_logprobs, "logprob_start_len": -1}


class BadReply(ValueError):
    """A /generate reply that is not SGLang's shape for this request."""


def _pair(entry: Any, where: str) -> Tuple[int, float]:
    """SGLang's (logprob, token_id, text) tuple, as JSON: [logprob, id, null] → (id, logprob)."""
    if not isinstance(entry, list) or len(entry) < 2 or not isinstance(entry[1], int) \
            or not isinstance(entry[0], (int, float)) or isinstance(entry[0], bool):
        raise BadReply("%s: expected [logprob, token_id, text], got %r" % (where, entry))
    return entry[1], float(entry[0])


def parse_reply(a: AnswersSpec, reply: Any) -> List[dict[str, Any]]:
    """SGLang's batched reply (a list, one object per prompt) → per prompt: input ids, output ids, the chosen
    tokens' logprobs and the top-K (id, logprob) per position (a null position: an empty list)."""
    if not isinstance(reply, list) or len(reply) != len(a.input_ids):
        raise BadReply("expected a JSON list of %d answers (one per prompt), got %s" % (
            len(a.input_ids), "a list of %d" % len(reply) if isinstance(reply, list) else type(reply).__name__))
    out = []
    for i, (ids, item) in enumerate(zip(a.input_ids, reply)):
        where = "answer %d" % i
        meta = item.get("meta_info") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise BadReply("%s: no meta_info object" % where)
        output_ids = item.get("output_ids")
        chosen = meta.get("output_token_logprobs")
        top = meta.get("output_top_logprobs")
        if not isinstance(output_ids, list) or not isinstance(chosen, list) or not isinstance(top, list):
            raise BadReply("%s: needs output_ids, meta_info.output_token_logprobs and meta_info.output_top_logprobs "
                           "(is return_logprob honoured?)" % where)
        if not (len(output_ids) == len(chosen) == len(top) == a.output_len):
            raise BadReply("%s: %d output ids, %d logprobs, %d top-logprob positions; asked for %d tokens" % (
                where, len(output_ids), len(chosen), len(top), a.output_len))
        pairs = [_pair(e, "%s position %d" % (where, p)) for p, e in enumerate(chosen)]
        if [t for t, _ in pairs] != output_ids:
            raise BadReply("%s: output_token_logprobs name other tokens than output_ids" % where)
        tops = []
        for p, pos in enumerate(top):
            if pos is not None and not isinstance(pos, list):
                raise BadReply("%s position %d: top logprobs are not a list" % (where, p))
            tops.append([list(_pair(e, "%s position %d top" % (where, p))) for e in (pos or [])])
        out.append({"input_ids": ids, "output_ids": output_ids, "logprobs": [lp for _, lp in pairs], "top": tops})
    return out


class _Ask:
    """The POST in a thread of its own; the stage watches the server meanwhile."""

    def __init__(self, load: Load, body: dict[str, Any], timeout: float) -> None:
        self.answer: Optional[Tuple[int, str]] = None
        self.error: Optional[str] = None
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(load, body, timeout), name="answers-post", daemon=True).start()

    def _run(self, load: Load, body: dict[str, Any], timeout: float) -> None:
        try:
            self.answer = load.server.post("/generate", body, timeout=timeout)
        except Exception as exc:  # any way the request fails is the stage's failure, said in its words
            if isinstance(exc, socket.timeout) or isinstance(getattr(exc, "reason", None), socket.timeout):
                self.error = "got no answer within %ss" % timeout
            else:
                self.error = "failed: %s" % (str(exc) or type(exc).__name__)
        finally:
            self.done.set()
            load.link.wake.set()


def check_answers(load: Load) -> float:
    """Ask (`passes` times: from the second on, each prefill is a prefix-cache hit), write answers.json (its path
    in `facts.bench.answers_file`; a later pass's prompts follow the first's, each with its `pass`); the seconds
    it took."""
    a = load.spec.answers
    assert a is not None
    t0 = time.monotonic()
    prompts: List[dict[str, Any]] = []
    for number in range(1, max(1, int(a.passes)) + 1):
        for answer in _ask_once(load, a):
            if number > 1:
                answer["pass"] = number
            prompts.append(answer)
    path = os.path.join(load.attempt_dir, ANSWERS_FILE)
    doc = {"version": FILE_VERSION, "settings": a.settings, "request": request_body_settings(a), "prompts": prompts}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)
    load.facts.bench.answers_file = path
    return round(time.monotonic() - t0, 4)


def _ask_once(load: Load, a: AnswersSpec) -> List[dict[str, Any]]:
    """One batched request, watched; its answers parsed (any failure: the stage's, in its words)."""
    t0 = time.monotonic()
    timeout = float(load.spec.timeouts.bench)
    ask = _Ask(load, request_body(a), timeout)
    deadline = t0 + timeout + 5  # the request's own timeout ends it first; this is the backstop
    while not ask.done.is_set():
        load.check_abort()
        load.server.watch("serving")
        if time.monotonic() > deadline:
            raise StageFailed(Status.BENCH_FAILED, "answer check: POST /generate got no answer within %ss" % timeout)
        load.link.wake.wait(TICK_S)
        load.link.wake.clear()
    load.server.watch("serving")  # a server crash explains a failed request better than the request does
    if ask.error is not None:
        raise StageFailed(Status.BENCH_FAILED, "answer check: POST /generate %s" % ask.error)
    assert ask.answer is not None
    code, text = ask.answer
    if code != 200:
        raise StageFailed(Status.BENCH_FAILED, "answer check: POST /generate answered HTTP %s: %s"
                          % (code, text.strip()[:2000]))
    try:
        return parse_reply(a, json.loads(text))
    except (ValueError, BadReply) as exc:
        raise StageFailed(Status.BENCH_FAILED, "answer check: the reply of POST /generate is not SGLang's shape: %s; "
                          "it began: %s" % (exc, text.strip()[:500])) from None


def request_body_settings(a: AnswersSpec) -> dict[str, Any]:
    """The request as answers.json records it: everything but the prompts (which are in each prompt's entry)."""
    body = request_body(a)
    del body["input_ids"]
    return body
