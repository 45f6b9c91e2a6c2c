"""The HTTP server (SGLang's routes on the standard library's ThreadingHTTPServer).

Like SGLang with uvicorn, the port is bound only after the model is loaded;
a warmup thread then sends one request through the whole stack and prints
"The server is fired up and ready to roll!".
"""

import http.client
import json
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sglang._sim import ignore_sigterm, milestone, startup_sleep
from sglang._sim.model_output import Generation
from sglang.srt.entrypoints.engine import (
    _launch_subprocesses,
    shutdown_subprocesses,
    start_subprocess_watchdog,
)
from sglang.srt.entrypoints.openai_api import OpenAIServing
from sglang.srt.managers.tokenizer_manager import count_tokens, detokenize
from sglang.srt.mem_cache.radix_cache import prefix_keys
from sglang.srt.utils import get_exception_traceback, kill_process_tree
from sglang.version import __version__

logger = logging.getLogger(__name__)
uvicorn_logger = logging.getLogger("uvicorn.error")
access_logger = logging.getLogger("uvicorn.access")

HEALTH_CHECK_TIMEOUT = 20
DEFAULT_MAX_NEW_TOKENS = 128


class _GlobalState:
    tokenizer_manager = None
    server_args = None
    scheduler_info = None
    httpd = None


_global_state = _GlobalState()


class _UvicornFormatter(logging.Formatter):
    def format(self, record):
        record.levelprefix = record.levelname + ":" + " " * (8 - len(record.levelname))
        return super().format(record)


def _setup_uvicorn_loggers(server_args):
    level = getattr(logging, (server_args.log_level_http or server_args.log_level).upper(), logging.INFO)
    for lg, stream in ((uvicorn_logger, sys.stderr), (access_logger, sys.stdout)):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(
            _UvicornFormatter("[%(asctime)s] %(levelprefix)s %(message)s", "%Y-%m-%d %H:%M:%S")
        )
        lg.handlers = [handler]
        lg.setLevel(level)
        lg.propagate = False


# --------------------------------------------------------------------------- handler


class SGLangRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    # ---- plumbing

    def log_message(self, format, *args):
        pass

    def log_request(self, code="-", size="-"):
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        access_logger.info('%s:%d - "%s" %s %s' % (host, port, self.requestline, code, phrase))

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        return json.loads(raw.decode("utf-8"))

    def _discard_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def _send(self, code, payload=b"", content_type="application/json"):
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def send_json(self, code, obj):
        self._send(code, json.dumps(obj).encode("utf-8"))

    def send_text(self, code, text):
        self._send(code, text.encode("utf-8"), "text/plain; charset=utf-8")

    def start_stream(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def write_event(self, data):
        payload = b"data: " + data + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def _dispatch(self, method):
        parts = urlsplit(self.path)
        self.query = parse_qs(parts.query)
        route = ROUTES.get(parts.path)
        if route is None:
            self._discard_body()
            return self.send_json(404, {"detail": "Not Found"})
        methods, fn = route
        if method not in methods:
            self._discard_body()
            return self.send_json(405, {"detail": "Method Not Allowed"})
        api_key = _global_state.server_args.api_key
        if api_key and not parts.path.startswith("/health"):
            if self.headers.get("Authorization") != "Bearer " + api_key:
                self._discard_body()
                return self.send_json(401, {"error": "Unauthorized"})
        try:
            fn(self)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except json.JSONDecodeError as e:
            self.send_json(400, {"error": {"message": "Invalid JSON body: %s" % e}})


# --------------------------------------------------------------------------- routes


def health_generate(h):
    """Check the health of the inference server by generating one token."""
    tm = _global_state.tokenizer_manager
    if tm.gracefully_exit:
        logger.info("Health check request received during shutdown. Returning 503.")
        return h.send_text(503, "")
    if tm.server_status == "Starting":
        return h.send_text(503, "")
    if h.path.split("?", 1)[0] == "/health" and not _health_endpoint_generation():
        return h.send_text(200, "")
    tic = time.time()
    state = tm.generate(1, 1, False, internal=True, rid="HEALTH_CHECK_%s" % uuid.uuid4().hex)
    try:
        if state.next_output(timeout=HEALTH_CHECK_TIMEOUT) is not None:
            tm.server_status = "Up"
            return h.send_text(200, "")
    except queue.Empty:
        pass
    finally:
        tm.release(state.rid)
    logger.error(
        f"Health check failed. Server couldn't get a response from detokenizer for last "
        f"{HEALTH_CHECK_TIMEOUT} seconds. tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. "
        f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(tm.last_receive_tstamp))}"
    )
    tm.server_status = "UnHealthy"
    return h.send_text(503, "")


def _health_endpoint_generation():
    """SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (default true): /health generates a token like /health_generate;
    off, /health answers 200 without asking the scheduler."""
    raw = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION")
    if raw is None or raw.strip() == "":
        return True
    return raw.strip().lower() in ("1", "true", "yes", "y", "on")


def ready(h):
    tm = _global_state.tokenizer_manager
    h.send_text(200 if tm.server_status == "Up" and not tm.gracefully_exit else 503, "")


def model_info_dict():
    tm = _global_state.tokenizer_manager
    args = _global_state.server_args
    cfg = tm.model_config
    return {
        "model_path": args.model_path,
        "served_model_name": args.served_model_name,
        "tokenizer_path": args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": args.load_format,
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": cfg.model_type,
        "architectures": cfg.architectures,
    }


def model_info(h):
    h.send_json(200, model_info_dict())


def get_model_info(h):
    logger.warning(
        "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
        "Please use '/model_info' instead."
    )
    model_info(h)


def server_info(h):
    import dataclasses

    tm = _global_state.tokenizer_manager
    try:
        internal_states = tm.call("get_internal_state", timeout=10)
    except TimeoutError:
        internal_states = []
    info = dataclasses.asdict(_global_state.server_args)
    info.update(_global_state.scheduler_info)
    info.update(
        {
            "startup_time": tm.startup_time,
            "internal_states": internal_states,
            "version": __version__,
            "frontend": "python",
        }
    )
    h.send_json(200, info)


def get_server_info(h):
    logger.warning(
        "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
        "Please use '/server_info' instead."
    )
    server_info(h)


def available_models(h):
    tm = _global_state.tokenizer_manager
    name = _global_state.server_args.served_model_name
    h.send_json(
        200,
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(tm.startup_time),
                    "owned_by": "sglang",
                    "root": name,
                    "parent": None,
                    "max_model_len": tm.model_config.context_len,
                }
            ],
        },
    )


def _error(h, message, code=400):
    h.send_json(code, {"error": {"message": message, "type": "BadRequestError", "code": code}})


def _meta_info(state, n, reason):
    meta = {
        "id": state.rid,
        "finish_reason": reason,
        "prompt_tokens": state.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": n,
        "cached_tokens": 0,
    }
    if reason is not None:
        meta["e2e_latency"] = time.time() - state.created
    return meta


def _generation(state):
    """The request's greedy continuation (sglang._sim.model_output), made once per request."""
    gen = getattr(state, "generation", None)
    if gen is None:
        prompt = getattr(state, "prompt", None)
        backend = getattr(_global_state.server_args, "attention_backend", None)
        gen = state.generation = Generation(prompt if prompt is not None else state.rid, backend)
    return gen


def _logprob_meta(state, n, lp):
    """SGLang's logprob fields of meta_info (return_logprob): [logprob, token_id, text] lists."""
    gen, k = _generation(state), lp["top_logprobs_num"]
    meta = {}
    meta["input_token_logprobs"], input_top = gen.input_logprobs(lp["logprob_start_len"], k)
    meta["output_token_logprobs"] = gen.output_token_logprobs(n)
    if k > 0:
        meta["input_top_logprobs"] = input_top
        meta["output_top_logprobs"] = gen.output_top_logprobs(n, k)
    return meta


def _output(state, n, reason, index=0):
    meta = _meta_info(state, n, reason)
    lp = getattr(state, "logprob", None)
    if lp is not None:
        meta.update(_logprob_meta(state, n, lp))
    return {
        "text": detokenize(state.rid, n),
        "output_ids": list(_generation(state).extend(n)),
        "meta_info": meta,
        "index": index,
    }


def _logprob_request(body, i):
    """The request's logprob settings for prompt i (SGLang takes a value or a list per prompt), or None."""

    def pick(name, default):
        v = body.get(name, default)
        return v[i] if isinstance(v, list) else v

    if not pick("return_logprob", False):
        return None
    start = pick("logprob_start_len", -1)
    return {"top_logprobs_num": int(pick("top_logprobs_num", 0) or 0),
            "logprob_start_len": -1 if start is None else int(start)}


def submit(prompt_tokens, sampling_params, prompt=None):
    """Validate and submit one generation; returns a ReqState or an error message. `prompt` (its text or token
    ids) names its prefix for the prefix cache."""
    tm = _global_state.tokenizer_manager
    if tm.gracefully_exit:
        return None, "The server is shutting down."
    max_new = sampling_params.get("max_new_tokens")
    max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
    context_len = tm.model_config.context_len
    if prompt_tokens + max_new > context_len:
        return None, (
            f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
            f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the "
            f"input messages and {max_new} tokens for the completion. Please reduce the number of tokens in "
            f"the input messages or the completion to fit within the limit."
        )
    internal = tm.server_status != "Up"
    state = tm.generate(
        prompt_tokens, max(max_new, 1), bool(sampling_params.get("ignore_eos", False)), internal,
        keys=prefix_keys(prompt.split() if isinstance(prompt, str) else prompt or []),
    )
    state.max_new_tokens = max_new
    return state, None


def wait_outputs(state):
    """Yield (completion_tokens, finish_reason) as the scheduler produces tokens."""
    if state.max_new_tokens == 0:
        yield 0, {"type": "length", "length": 0}
        return
    while True:
        item = state.next_output()
        if item is None:
            raise ConnectionResetError("server shutting down")
        n, reason = item
        yield n, reason
        if reason is not None:
            return


def generate_request(h):
    """Handle a generate request."""
    body = h._body()
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        return _error(h, "Either text or input_ids should be provided.")
    if isinstance(text, list) or (
        isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)
    ):
        prompts = [count_tokens(t) for t in text] if text is not None else [len(x) for x in input_ids]
    else:
        prompts = [count_tokens(text) if text is not None else len(input_ids)]
    sampling_params = body.get("sampling_params") or {}
    tm = _global_state.tokenizer_manager
    states = []
    if isinstance(text, list):
        sources = text
    elif isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list):
        sources = input_ids
    else:
        sources = [text if text is not None else input_ids]
    for i, p in enumerate(prompts):
        state, err = submit(p, sampling_params, sources[i])
        if err:
            for s in states:
                tm.abort(s.rid)
            return _error(h, err)
        state.prompt, state.logprob = sources[i], _logprob_request(body, i)
        states.append(state)
    batched = len(prompts) > 1 or isinstance(text, list) or (input_ids and isinstance(input_ids[0], list))
    if body.get("stream"):
        if len(states) > 1:
            for s in states:
                tm.abort(s.rid)
            return _error(h, "Streaming a batch of prompts is not supported by the simulated target.")
        state = states[0]
        h.start_stream()
        try:
            for n, reason in wait_outputs(state):
                h.write_event(json.dumps(_output(state, n, reason)).encode("utf-8"))
            h.write_event(b"[DONE]")
            h.end_stream()
        except (BrokenPipeError, ConnectionResetError):
            tm.abort(state.rid)
            h.close_connection = True
        finally:
            tm.release(state.rid)
        return
    results = []
    for i, state in enumerate(states):
        n, reason = 0, None
        for n, reason in wait_outputs(state):
            pass
        tm.release(state.rid)
        results.append(_output(state, n, reason, index=i))
    h.send_json(200, results if batched else results[0])


def flush_cache(h):
    ok = all(_global_state.tokenizer_manager.call("flush_cache"))
    if ok:
        h.send_text(
            200,
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n",
        )
    else:
        h.send_text(400, "Flush cache failed.\n")


# ProfileReq's fields (io_struct.py) and their types: a wrong type is a 400, an unknown key is ignored.
PROFILE_REQ_FIELDS = {
    "output_dir": "str", "start_step": "int", "num_steps": "int", "activities": "list", "profile_by_stage": "bool",
    "with_stack": "bool", "record_shapes": "bool", "profile_id": "str", "merge_profiles": "bool",
    "profile_prefix": "str", "profile_stages": "list",
}
_NOT_OPTIONAL = ("profile_by_stage", "merge_profiles")


def _profile_field(name, kind, value):
    if value is None and name not in _NOT_OPTIONAL:
        return None
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)  # lax, like pydantic: SGLang's own bench client sends "5"
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        if value in (0, 1, "0", "1", "true", "false", "True", "False"):
            return str(value).lower() in ("1", "true")
    elif kind == "str":
        if isinstance(value, str):
            return value
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError("%s: Input should be a valid %s" % (name, {"int": "integer", "bool": "boolean",
                                                                "str": "string", "list": "list"}[kind]))


def _env_true(name):
    return os.environ.get(name, "true").lower() in ("1", "true", "yes", "on")


def _execute_profile(h, req, ok_text):
    """TokenizerManager._execute_profile: waits for the scheduler (no timeout); a failure raises -> 500."""
    answers = _global_state.tokenizer_manager.call("profile", req, timeout=None)
    failed = [message for success, message in answers if not success]
    if failed:
        uvicorn_logger.error("Exception in ASGI application\nTraceback (most recent call last):\n"
                             "RuntimeError: %s" % failed[0])
        return h.send_text(500, "Internal Server Error")
    h.send_text(200, ok_text)


def start_profile(h):
    body = h._body() if h.command == "POST" else {}
    if not isinstance(body, dict):
        body = {}
    req = {"req_type": "start"}
    try:
        for name, kind in PROFILE_REQ_FIELDS.items():
            req[name] = _profile_field(name, kind, body.get(name, False if name in _NOT_OPTIONAL else None))
    except ValueError as e:
        return h.send_json(400, {"object": "error", "message": str(e), "type": "BadRequest", "param": None,
                                 "code": 400})
    # TokenizerControlMixin.start_profile: stacks and shapes on unless turned off (here or by env).
    req["with_stack"] = not (req["with_stack"] is False or not _env_true("SGLANG_PROFILE_WITH_STACK"))
    req["record_shapes"] = req["record_shapes"] is not False and _env_true("SGLANG_PROFILE_RECORD_SHAPES")
    req["profile_id"] = req["profile_id"] or str(time.time())
    _execute_profile(h, req, "Start profiling.\n")


def stop_profile(h):
    h._discard_body()
    _execute_profile(h, {"req_type": "stop"}, "Stop profiling. This will take some time.\n")


def freeze_gc(h):
    h.send_text(200, "")


_openai = OpenAIServing(_global_state, submit, wait_outputs, _error)

ROUTES = {
    "/health": (("GET",), health_generate),
    "/health_generate": (("GET",), health_generate),
    "/ready": (("GET",), ready),
    "/model_info": (("GET",), model_info),
    "/get_model_info": (("GET",), get_model_info),
    "/server_info": (("GET",), server_info),
    "/get_server_info": (("GET",), get_server_info),
    "/v1/models": (("GET",), available_models),
    "/generate": (("POST", "PUT"), generate_request),
    "/v1/completions": (("POST",), _openai.completions),
    "/v1/chat/completions": (("POST",), _openai.chat_completions),
    "/flush_cache": (("GET", "POST"), flush_cache),
    "/start_profile": (("GET", "POST"), start_profile),
    "/stop_profile": (("GET", "POST"), stop_profile),
    "/freeze_gc": (("GET", "POST"), freeze_gc),
}


# --------------------------------------------------------------------------- warmup


def _local_url(server_args):
    host = server_args.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    return host, server_args.port


def _request(method, path, body=None, timeout=600):
    host, port = _local_url(_global_state.server_args)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if _global_state.server_args.api_key:
            headers["Authorization"] = "Bearer " + _global_state.server_args.api_key
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        res = conn.getresponse()
        return res.status, res.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _execute_server_warmup(server_args):
    tm = _global_state.tokenizer_manager
    success, last_traceback = False, ""
    for _ in range(1200):
        startup_sleep(0.05)
        try:
            status, text = _request("GET", "/model_info", timeout=5)
            assert status == 200, f"res.status_code={status}, {text=}"
            success = True
            break
        except (AssertionError, OSError):
            last_traceback = get_exception_traceback()
    if not success:
        logger.error(f"Initialization failed. warmup error: {last_traceback}")
        kill_process_tree(os.getpid())
        return False
    json_data = {
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
        "text": "The capital city of France is",
    }
    if server_args.dp_size > 1:
        json_data["text"] = [json_data["text"]] * server_args.dp_size
    try:
        status, text = _request("POST", "/generate", json_data)
        assert status == 200, f"{text}"
        tm.server_status = "Up"
    except Exception:
        logger.error(f"Initialization failed. warmup error: {get_exception_traceback()}")
        kill_process_tree(os.getpid())
        return False
    return True


def _wait_and_warmup(server_args):
    milestone("uvicorn")
    if not server_args.skip_server_warmup:
        if not _execute_server_warmup(server_args):
            return
    else:
        _global_state.tokenizer_manager.server_status = "Up"
    milestone("warmup")
    # The server is ready for requests
    logger.info("The server is fired up and ready to roll!")


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def _graceful_exit():
    tm = _global_state.tokenizer_manager
    deadline = time.time() + 5
    while True:
        with tm.lock:
            remaining_rids = [rid for rid, s in tm.rid_to_state.items() if not s.internal]
        remain_num_req = len(remaining_rids)
        logger.info(
            f"Gracefully exiting... Remaining number of requests {remain_num_req}. "
            f"Remaining requests {remaining_rids=}."
        )
        if remain_num_req == 0 or time.time() > deadline:
            break
        time.sleep(0.1)
    shutdown_subprocesses(tm)
    tm.close_all()
    _global_state.httpd.shutdown()


def _sigterm_handler(signum, frame):
    tm = _global_state.tokenizer_manager
    if tm.gracefully_exit:
        return
    tm.gracefully_exit = True
    logger.warning(f"SIGTERM received. {signum=} {frame=}. Draining requests and shutting down...")
    threading.Thread(target=_graceful_exit, name="graceful-exit", daemon=True).start()


def launch_server(server_args):
    """Launch the schedulers, then serve HTTP until SIGTERM (or a crash)."""
    tokenizer_manager, scheduler_info = _launch_subprocesses(server_args)
    from sglang.srt.configs.model_config import ModelConfig

    tokenizer_manager.model_config = ModelConfig(server_args.model_path, server_args.context_length)
    _global_state.tokenizer_manager = tokenizer_manager
    _global_state.server_args = server_args
    _global_state.scheduler_info = scheduler_info

    _setup_uvicorn_loggers(server_args)
    pid = os.getpid()
    uvicorn_logger.info(f"Started server process [{pid}]")
    uvicorn_logger.info("Waiting for application startup.")
    uvicorn_logger.info("Application startup complete.")
    _Server.address_family = socket.AF_INET6 if ":" in server_args.host else socket.AF_INET
    try:
        httpd = _Server((server_args.host, server_args.port), SGLangRequestHandler)
    except OSError as exc:
        uvicorn_logger.error(
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"{(server_args.host, server_args.port)!r}: {(exc.strerror or str(exc)).lower()}"
        )
        uvicorn_logger.info("Waiting for application shutdown.")
        uvicorn_logger.info("Application shutdown complete.")
        shutdown_subprocesses(tokenizer_manager, timeout=1.0)
        sys.exit(1)
    _global_state.httpd = httpd
    uvicorn_logger.info(
        f"Uvicorn running on http://{server_args.host}:{server_args.port} (Press CTRL+C to quit)"
    )

    if ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, _sigterm_handler)
    signal.signal(signal.SIGINT, _sigterm_handler)
    start_subprocess_watchdog(tokenizer_manager)
    threading.Thread(target=_wait_and_warmup, args=(server_args,), name="warmup", daemon=True).start()

    httpd.serve_forever(poll_interval=0.1)
    httpd.server_close()
    uvicorn_logger.info("Shutting down")
    uvicorn_logger.info("Waiting for application shutdown.")
    uvicorn_logger.info("Application shutdown complete.")
    uvicorn_logger.info(f"Finished server process [{pid}]")
