"""The answer check: its YAML, its spec, the agent's request and reply parsing (and its stage against a loopback
server), and the comparison rule (harness/analysis/answers.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.agent.answers import BadReply, check_answers, parse_reply, request_body
from harness.agent.errors import StageFailed
from harness.analysis.answers import (
    AnswerSet,
    AnswersMismatch,
    PromptAnswer,
    compare_answers,
    parse_answers,
    verdict_text,
)
from harness.common.protocol import AnswersSpec, Final, ServerSpec, Spec, Status, Timeouts
from harness.errors import ConfigError
from harness.experiments.config import AnswersSettings
from harness.experiments.files import read_experiment_file
from harness.experiments.spec import answer_prompts, answers_spec

# ============================================================================ the comparison rule

IDS = (11, 12, 13)


def prompt(tokens, logprobs, tops=None, input_ids=IDS) -> PromptAnswer:
    """One prompt's answer; `tops` per position, default: the chosen token, then id 99 at logprob -3."""
    tops = tops or [{t: lp, 99: -3.0} for t, lp in zip(tokens, logprobs)]
    return PromptAnswer(tuple(input_ids), tuple(tokens), tuple(logprobs), tuple(tops))


def answer_set(*prompts, **settings) -> AnswerSet:
    base = {"prompts": len(prompts), "input_len": 3, "output_len": 4, "seed": 7, "top_logprobs": 2,
            "vocab": 32000, "max_dlogprob": 0.25, "tie_margin": 0.1}
    return AnswerSet({**base, **settings}, tuple(prompts))


REF = answer_set(prompt([1, 2, 3, 4], [-0.1, -0.5, -0.2, -0.3]), prompt([5, 6, 7, 8], [-0.2, -0.2, -0.9, -0.1]))


def test_identical_answers_pass():
    v = compare_answers(REF, REF)
    assert v.passed and v.top1 == 1.0 and v.max_dlogprob == 0 and (v.diverged, v.bad) == (0, 0)
    assert verdict_text(v) == "✓ 100% Δ0"


def test_tiny_logprob_noise_passes():
    row = answer_set(prompt([1, 2, 3, 4], [-0.101, -0.504, -0.2, -0.3]), REF.prompts[1])
    v = compare_answers(row, REF)
    assert v.passed and v.top1 == 1.0 and v.max_dlogprob == pytest.approx(0.004)
    assert verdict_text(v) == "✓ 100% Δ0.004"


def test_a_near_tie_divergence_passes_and_is_counted():
    # position 1: the reference chose 2 (-0.50) with 9 at -0.55 in its top-K; the row chose 9; what follows differs
    ref = answer_set(prompt([1, 2, 3, 4], [-0.1, -0.5, -0.2, -0.3],
                            [{1: -0.1}, {2: -0.5, 9: -0.55}, {3: -0.2}, {4: -0.3}]), REF.prompts[1])
    row = answer_set(prompt([1, 9, 30, 40], [-0.1, -0.52, -5.0, -5.0]), REF.prompts[1])
    v = compare_answers(row, ref)
    assert v.passed and (v.diverged, v.bad) == (1, 0)
    assert v.top1 == pytest.approx(5 / 8) and v.max_dlogprob == 0  # nothing after the divergence is compared
    assert verdict_text(v) == "✓ 62% Δ0 (1 tie)"


def test_a_divergence_wider_than_the_tie_margin_is_bad():
    ref = answer_set(prompt([1, 2, 3, 4], [-0.1, -0.5, -0.2, -0.3],
                            [{1: -0.1}, {2: -0.5, 9: -0.7}, {3: -0.2}, {4: -0.3}]), REF.prompts[1])
    row = answer_set(prompt([1, 9, 3, 4], [-0.1, -0.5, -0.2, -0.3]), REF.prompts[1])
    v = compare_answers(row, ref)
    assert not v.passed and (v.diverged, v.bad) == (1, 1)
    assert compare_answers(row, ref, tie_margin=0.25).passed  # the margin decides


def test_a_token_outside_the_references_top_k_is_bad():
    row = answer_set(prompt([1, 2, 77, 4], [-0.1, -0.5, -0.2, -0.3]), REF.prompts[1])
    v = compare_answers(row, REF)
    assert not v.passed and (v.diverged, v.bad) == (1, 1) and v.top1 == pytest.approx(7 / 8)
    assert verdict_text(v) == "✗ 87% Δ0 (1 bad)"


def test_a_logprob_shift_above_the_threshold_fails_without_any_divergence():
    row = answer_set(prompt([1, 2, 3, 4], [-0.1, -0.9, -0.2, -0.3]), REF.prompts[1])
    v = compare_answers(row, REF)
    assert not v.passed and v.top1 == 1.0 and (v.diverged, v.bad) == (0, 0)
    assert v.max_dlogprob == pytest.approx(0.4) and verdict_text(v) == "✗ 100% Δ0.4"
    assert compare_answers(row, REF, max_dlogprob=0.5).passed
    assert compare_answers(answer_set(*row.prompts, max_dlogprob=0.5), REF).passed  # the row's own threshold


def test_mismatched_prompts_or_settings_are_refused_saying_why():
    other_ids = answer_set(REF.prompts[0], prompt([5, 6, 7, 8], [-0.2] * 4, input_ids=(11, 12, 14)))
    with pytest.raises(AnswersMismatch, match="prompt 1 has other input ids"):
        compare_answers(other_ids, REF)
    with pytest.raises(AnswersMismatch, match="output_len 8 vs 4"):
        compare_answers(answer_set(*REF.prompts, output_len=8), REF)
    with pytest.raises(AnswersMismatch, match="prompts 1 vs 2"):
        compare_answers(answer_set(REF.prompts[0]), REF)
    assert compare_answers(answer_set(*REF.prompts, tie_margin=0.3), REF).passed  # thresholds only judge


def test_answers_json_round_trip_and_damage():
    doc = {"settings": dict(REF.settings), "prompts": [
        {"input_ids": list(p.input_ids), "output_ids": list(p.output_ids), "logprobs": list(p.logprobs),
         "top": [[[t, lp] for t, lp in pos.items()] for pos in p.top]} for p in REF.prompts]}
    assert parse_answers(json.loads(json.dumps(doc))) == REF
    doc["prompts"][0]["logprobs"] = doc["prompts"][0]["logprobs"][:2]
    with pytest.raises(ValueError, match="differ in length"):
        parse_answers(doc)


def test_the_table_cell_per_row_reference_and_no_reference():
    from harness.analysis.answers import attach
    from harness.analysis.compare import build_rows
    from harness.results.schemas import Record

    def rec(exp, answers=True, status=Status.OK):
        return Record(run_id="r", experiment=exp, attempt="01", host="h", status=status,
                      answers={"prompts": 2} if answers else None)

    bad = answer_set(prompt([1, 2, 77, 4], [-0.1, -0.5, -0.2, -0.3]), REF.prompts[1])
    sets = {"base": REF, "same": REF, "wrong": bad, "other": answer_set(*REF.prompts, seed=8), "torn": "bad JSON"}
    records = [rec(e) for e in sets] + [rec("none", answers=False)]

    def cells(named):
        rows = build_rows(records, metric="output_throughput", baseline="base")
        attach(rows, records, lambda r: sets[r.experiment], named_baseline=named)
        return {r.experiment: r.answers for r in rows}, {r.experiment: r.notes for r in rows}

    got, notes = cells(True)
    assert got == {"base": "ref", "same": "✓ 100% Δ0", "wrong": "✗ 87% Δ0 (1 bad)", "other": "≠ ref", "torn": "?",
                   "none": None}
    assert any("seed 8 vs 7" in n for n in notes["other"]) and notes["torn"] == ["answers: bad JSON"]
    from harness.render.page import table_context
    from harness.render.tableformats import to_csv

    rows = build_rows(records, metric="output_throughput", baseline="base")
    attach(rows, records, lambda r: sets[r.experiment], named_baseline=True)
    page = table_context(rows, "output_throughput")
    at = page["headers"].index("answers")
    by = {line["label"]: line["cells"][at] for line in page["rows"]}
    assert by["wrong"]["text"] == "✗ 87% Δ0 (1 bad)" and by["wrong"]["cls"] == "v-worse"
    assert by["same"]["cls"] == "v-better" and by["base"]["text"] == "ref" and by["none"]["text"] == ""
    assert "answers" in to_csv(rows).splitlines()[0].split(",") and "✓ 100% Δ0" in to_csv(rows)
    got, _ = cells(False)  # no baseline named (the table's stand-in is no reference)
    assert got["same"] == got["wrong"] == got["base"] == "no ref"


# ============================================================================ YAML and spec


def test_answers_yaml_defaults_spec_and_errors_name_file_and_line(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text("model: {path: m}\nanswers:\n  prompts: 3\n  input_len: 5\n")
    exp = read_experiment_file(f).experiment
    assert exp.answers == AnswersSettings(prompts=3, input_len=5)
    a = exp.answers
    assert a.output_len == 32 and a.top_logprobs == 20 and a.vocab == 32000 and a.max_dlogprob == 0.25
    spec = answers_spec(a)
    assert len(spec.input_ids) == 3 and all(len(p) == 5 and all(100 <= t < 32000 for t in p) for p in spec.input_ids)
    assert answer_prompts(a) == spec.input_ids and answer_prompts(a.model_copy(update={"seed": 8})) != spec.input_ids
    assert spec.settings["tie_margin"] == 0.1
    f.write_text("model: {path: m}\nanswers:\n  prompts: 3\n  top_logprob: 5\n")
    msg = str(pytest.raises(ConfigError, read_experiment_file, f).value)
    assert f"{f}:4:" in msg and "top_logprobs" in msg
    f.write_text("model: {path: m}\nanswers:\n  prompts: 0\n")
    msg = str(pytest.raises(ConfigError, read_experiment_file, f).value)
    assert f"{f}:3:" in msg and "greater than or equal to 1" in msg


# ============================================================================ the agent's side

SPEC = AnswersSpec(input_ids=[[101, 102], [103, 104]], output_len=2, top_logprobs=2, settings={"seed": 7})


def reply_item(ids):
    return {"text": "x", "output_ids": ids, "meta_info": {
        "output_token_logprobs": [[-0.1, ids[0], None], [-0.2, ids[1], None]],
        "output_top_logprobs": [[[-0.1, ids[0], None], [-2.0, 5, None]], None]}}


def test_request_body_is_sglangs_batched_greedy_request():
    assert request_body(SPEC) == {
        "input_ids": [[101, 102], [103, 104]],
        "sampling_params": {"temperature": 0, "max_new_tokens": 2, "ignore_eos": True},
        "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": -1}


def test_reply_parsing_takes_sglangs_shapes_and_refuses_others():
    out = parse_reply(SPEC, [reply_item([7, 8]), reply_item([9, 9])])
    assert out[0] == {"input_ids": [101, 102], "output_ids": [7, 8], "logprobs": [-0.1, -0.2],
                      "top": [[[7, -0.1], [5, -2.0]], []]}
    with pytest.raises(BadReply, match="list of 2 answers"):
        parse_reply(SPEC, reply_item([7, 8]))  # one object: not a batched answer
    bare = reply_item([7, 8])
    del bare["meta_info"]["output_top_logprobs"]
    with pytest.raises(BadReply, match="return_logprob"):
        parse_reply(SPEC, [bare, reply_item([9, 9])])


class _Handler(BaseHTTPRequestHandler):
    reply: tuple[int, str] = (200, "[]")
    seen: list[dict] = []

    def do_POST(self):
        self.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        code, text = self.reply
        self.send_response(code)
        self.send_header("Content-Length", str(len(text.encode())))
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback():
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def fake_load(tmp_path: Path, port: int):
    import urllib.request

    def post(path, body, timeout):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    spec = Spec(run_id="r", attempt_id="a", repo="/x", server=ServerSpec(argv=[], port=port), answers=SPEC,
                timeouts=Timeouts(bench=10))
    server = SimpleNamespace(post=post, watch=lambda phase: None)
    return SimpleNamespace(spec=spec, server=server, attempt_dir=str(tmp_path), facts=Final(),
                           link=SimpleNamespace(wake=threading.Event()), check_abort=lambda: None)


def test_the_stage_writes_answers_json_and_fails_clearly_on_an_http_error(tmp_path, loopback):
    load = fake_load(tmp_path, loopback.server_port)
    _Handler.reply, _Handler.seen = (200, json.dumps([reply_item([7, 8]), reply_item([9, 9])])), []
    check_answers(load)
    assert _Handler.seen == [request_body(SPEC)]
    doc = json.loads((tmp_path / "answers.json").read_text())
    assert load.facts.bench.answers_file == str(tmp_path / "answers.json")
    assert doc["settings"] == {"seed": 7} and doc["request"]["top_logprobs_num"] == 2
    assert [p["output_ids"] for p in doc["prompts"]] == [[7, 8], [9, 9]]
    _Handler.reply = (400, '{"error": {"message": "Requested token count exceeds the model\'s maximum context"}}')
    err = pytest.raises(StageFailed, check_answers, fake_load(tmp_path / "x", loopback.server_port)).value
    assert err.status == Status.BENCH_FAILED and "HTTP 400" in err.message and "maximum context" in err.message


def test_with_prefix_hit_the_same_request_goes_twice_and_the_second_pass_is_marked(tmp_path, loopback):
    """The second time each prompt is a prefix-cache hit on a real server: its prefill takes the paged path (the
    one a prefill gather changes), so that path's answers are judged too."""
    import dataclasses

    load = fake_load(tmp_path, loopback.server_port)
    load.spec.answers = dataclasses.replace(SPEC, passes=2)
    _Handler.reply, _Handler.seen = (200, json.dumps([reply_item([7, 8]), reply_item([9, 9])])), []
    check_answers(load)
    assert _Handler.seen == [request_body(SPEC)] * 2
    doc = json.loads((tmp_path / "answers.json").read_text())
    assert [(p.get("pass", 1), p["output_ids"]) for p in doc["prompts"]] == [
        (1, [7, 8]), (1, [9, 9]), (2, [7, 8]), (2, [9, 9])]
    assert answers_spec(AnswersSettings()).passes == 2 and answers_spec(AnswersSettings(prefix_hit=False)).passes == 1


def test_a_server_that_dies_during_the_request_is_a_crash(tmp_path):
    """The server is watched while the request waits: its crash, not the request, is the stage's failure."""
    import socket

    with socket.socket() as s:  # listens, never answers: the request waits
        s.bind(("127.0.0.1", 0))
        s.listen()
        load = fake_load(tmp_path, s.getsockname()[1])

        def watch(phase):
            raise StageFailed(Status.CRASHED, "the server died (exit 137) during serving")

        load.server.watch = watch
        err = pytest.raises(StageFailed, check_answers, load).value
    assert err.status == Status.CRASHED and not (tmp_path / "answers.json").exists()
