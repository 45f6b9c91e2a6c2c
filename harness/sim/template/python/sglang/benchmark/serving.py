"""Benchmark online serving throughput (standard library only: threads + http.client).

Usage:
python3 -m sglang.benchmark.serving --backend sglang --dataset-name random --num-prompts 10 \
    --random-input-len 1024 --random-output-len 32

Same flags, console summary and JSONL keys as SGLang's benchmark client. The
simulated tokenizer counts one token per whitespace-separated word, like the
simulated server.
"""

import argparse
import json
import math
import random
import sys
import threading
import time
import traceback
import warnings
from datetime import datetime
from http.client import HTTPConnection, HTTPSConnection
from urllib.parse import urlsplit

_BACKEND_API_PATHS = {
    "sglang": "/generate",
    "sglang-native": "/generate",
    "sglang-oai": "/v1/completions",
    "sglang-oai-chat": "/v1/chat/completions",
    "vllm": "/v1/completions",
    "vllm-chat": "/v1/chat/completions",
    "lmdeploy": "/v1/completions",
    "lmdeploy-chat": "/v1/chat/completions",
}
BACKENDS = [
    "sglang",
    "sglang-native",
    "sglang-oai",
    "sglang-oai-chat",
    "sglang-embedding",
    "vllm",
    "vllm-chat",
    "vllm-embedding",
    "lmdeploy",
    "lmdeploy-chat",
    "trt",
    "gserver",
    "truss",
]
DATASETS = [
    "agentic-trace",
    "sharegpt",
    "custom",
    "openai",
    "random",
    "random-ids",
    "generated-shared-prefix",
    "mmmu",
    "image",
    "mooncake",
    "longbench_v2",
    "speed-bench",
]
_WORDS = (
    "system data model token server request batch layer cache memory kernel tensor graph queue stream "
    "value result output input answer question story river mountain city history science music number"
).split()


class DatasetRow:
    def __init__(self, prompt, prompt_len, output_len):
        self.prompt = prompt
        self.prompt_len = prompt_len
        self.output_len = output_len


class RequestFuncOutput:
    def __init__(self, prompt_len):
        self.generated_text = ""
        self.success = False
        self.latency = 0.0
        self.ttft = 0.0
        self.itl = []
        self.prompt_len = prompt_len
        self.output_len = 0
        self.error = ""
        self.start_time = 0.0


# ----------------------------------------------------------------------------- HTTP


def _connection(url, timeout):
    parts = urlsplit(url)
    cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), parts.path or "/"


def _headers(args):
    headers = {"Content-Type": "application/json"}
    for item in args.header or []:
        key, _, value = item.partition("=")
        headers[key] = value
    return headers


def http_get(url, args, timeout=30):
    conn, path = _connection(url, timeout)
    try:
        conn.request("GET", path, headers=_headers(args))
        res = conn.getresponse()
        return res.status, res.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _iter_lines(res):
    while True:
        line = res.readline()
        if not line:
            return
        yield line


def request_once(args, api_url, row, output_len, extra_body):
    """Send one request; measure TTFT and inter-token latencies like SGLang's client."""
    out = RequestFuncOutput(row.prompt_len)
    backend = args.backend
    if backend in ("sglang", "sglang-native"):
        payload = {
            ("text" if isinstance(row.prompt, str) else "input_ids"): row.prompt,
            "sampling_params": {
                "temperature": args.temperature,
                "max_new_tokens": output_len,
                "ignore_eos": not args.disable_ignore_eos,
            },
            "stream": not args.disable_stream,
        }
    elif backend.endswith("chat"):
        payload = {
            "model": args.model,
            "messages": [{"role": "user", "content": row.prompt}],
            "temperature": 0.0,
            "max_completion_tokens": output_len,
            "stream": not args.disable_stream,
            "ignore_eos": not args.disable_ignore_eos,
        }
    else:
        payload = {
            "model": args.model,
            "prompt": row.prompt,
            "best_of": 1,
            "max_tokens": output_len,
            "stream": not args.disable_stream,
            "temperature": 0.0,
            "ignore_eos": not args.disable_ignore_eos,
        }
    payload.update(extra_body)

    generated_text, ttft, last_len = "", 0.0, 0
    st = time.perf_counter()
    out.start_time = st
    most_recent = st
    try:
        conn, path = _connection(api_url, timeout=6 * 3600)
        try:
            conn.request("POST", path, body=json.dumps(payload), headers=_headers(args))
            res = conn.getresponse()
            if res.status != 200:
                out.error = (res.reason or "") + ": " + res.read().decode("utf-8", "replace")
                return out
            output_len = output_len
            for raw in _iter_lines(res):
                chunk = raw.strip()
                if not chunk:
                    continue
                data_bytes = chunk[6:] if chunk.startswith(b"data: ") else chunk
                latency = time.perf_counter() - st
                if data_bytes == b"[DONE]":
                    continue
                data = json.loads(data_bytes)
                text, n = _text_and_len(backend, data, generated_text, last_len)
                if text is None:
                    continue
                timestamp = time.perf_counter()
                generated_text = text
                if ttft == 0.0:
                    ttft = timestamp - st
                    out.ttft = ttft
                else:
                    new_tokens = n - last_len
                    if new_tokens == 0:
                        continue
                    gap = timestamp - most_recent
                    out.itl.extend([gap / new_tokens] * new_tokens)
                most_recent = timestamp
                last_len = n
            out.generated_text = generated_text
            out.success = True
            out.latency = latency if not args.disable_stream else time.perf_counter() - st
            if args.disable_stream:
                out.ttft = out.latency
            out.output_len = last_len if last_len else output_len
        finally:
            conn.close()
    except Exception:
        out.success = False
        out.error = "".join(traceback.format_exception(*sys.exc_info()))
        print(f"{out.error=}")
    return out


def _text_and_len(backend, data, previous_text, previous_len):
    """(cumulative text, cumulative completion tokens) of one streamed chunk, or (None, _)."""
    if backend in ("sglang", "sglang-native"):
        if not data.get("text"):
            return None, previous_len
        return data["text"], data["meta_info"]["completion_tokens"]
    choices = data.get("choices") or []
    if not choices:
        return None, previous_len
    piece = choices[0].get("text")
    if piece is None:
        piece = (choices[0].get("delta") or {}).get("content") or (choices[0].get("message") or {}).get(
            "content"
        )
    if not piece:
        return None, previous_len
    text = previous_text + piece
    return text, len(text.split())


# ----------------------------------------------------------------------------- datasets


def _random_text(rng, num_tokens):
    return " ".join(rng.choice(_WORDS) for _ in range(num_tokens))


def sample_random_requests(args, rng):
    lo_in = max(int(args.random_input_len * args.random_range_ratio), 1)
    lo_out = max(int(args.random_output_len * args.random_range_ratio), 1)
    rows = []
    for _ in range(args.num_prompts):
        input_len = rng.randint(lo_in, args.random_input_len)
        output_len = rng.randint(lo_out, args.random_output_len)
        if args.dataset_name == "random-ids" and args.tokenize_prompt:
            prompt = [rng.randint(100, 32000) for _ in range(input_len)]
        else:
            prompt = _random_text(rng, input_len)
        rows.append(DatasetRow(prompt, input_len, output_len))
    return rows


def sample_sharegpt_requests(args, rng):
    if not args.dataset_path:
        raise FileNotFoundError(
            "The simulated bench_serving does not download ShareGPT: pass --dataset-path with a local "
            "ShareGPT JSON file, or use --dataset-name random."
        )
    with open(args.dataset_path) as f:
        dataset = json.load(f)
    dataset = [d for d in dataset if len(d.get("conversations", d.get("conversation", []))) >= 2]
    rng.shuffle(dataset)
    rows = []
    for d in dataset:
        conv = d.get("conversations", d.get("conversation"))
        prompt, completion = conv[0]["value"], conv[1]["value"]
        prompt_len = max(1, len(prompt.split()))
        output_len = args.sharegpt_output_len or max(1, len(completion.split()))
        if prompt_len < 2 or output_len < 2:
            continue
        rows.append(DatasetRow(prompt, prompt_len, output_len))
        if len(rows) == args.num_prompts:
            break
    return rows


def sample_generated_shared_prefix_requests(args, rng):
    rows = []
    per_group = max(args.gsp_prompts_per_group, 1)
    for _ in range(max(args.gsp_num_groups, 1)):
        prefix = _random_text(rng, args.gsp_system_prompt_len)
        for _ in range(per_group):
            question = _random_text(rng, args.gsp_question_len)
            prompt = prefix + " " + question
            rows.append(DatasetRow(prompt, len(prompt.split()), args.gsp_output_len))
    return rows[: args.num_prompts] if args.num_prompts else rows


def get_dataset(args, rng):
    if args.dataset_name in ("random", "random-ids"):
        rows = sample_random_requests(args, rng)
    elif args.dataset_name == "sharegpt":
        rows = sample_sharegpt_requests(args, rng)
    elif args.dataset_name == "generated-shared-prefix":
        rows = sample_generated_shared_prefix_requests(args, rng)
    else:
        raise ValueError(f"Dataset {args.dataset_name!r} is not supported by the simulated bench_serving.")
    print(f"#Input tokens: {sum(r.prompt_len for r in rows)}")
    print(f"#Output tokens: {sum(r.output_len for r in rows)}")
    return rows


# ----------------------------------------------------------------------------- statistics


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def _percentile(xs, q):
    """numpy.percentile with linear interpolation."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def _std(xs):
    if not xs:
        return float("nan")
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _stats(name, xs, scale=1000.0, zero_if_empty=True):
    if not xs and zero_if_empty:
        xs = [0.0]
    vals = [x * scale for x in xs]
    return {
        f"mean_{name}": _mean(vals),
        f"median_{name}": _percentile(vals, 50),
        f"std_{name}": _std(vals),
        f"p90_{name}": _percentile(vals, 90),
        f"p95_{name}": _percentile(vals, 95),
        f"p99_{name}": _percentile(vals, 99),
        f"max_{name}": max(vals) if vals else float("nan"),
    }


def calculate_metrics(rows, outputs, dur_s):
    completed, total_input, output_lens, retok = 0, 0, [], []
    ttfts, tpots, itls, e2e = [], [], [], []
    for row, out in zip(rows, outputs):
        if not out.success:
            output_lens.append(0)
            retok.append(0)
            continue
        completed += 1
        total_input += row.prompt_len
        output_lens.append(out.output_len)
        retok.append(len(out.generated_text.split()))
        if out.output_len > 1:
            tpots.append((out.latency - out.ttft) / (out.output_len - 1))
        itls += out.itl
        ttfts.append(out.ttft)
        e2e.append(out.latency)
    if completed == 0:
        warnings.warn(
            "All requests failed. This is likely due to a misconfiguration on the benchmark arguments.",
            stacklevel=2,
        )
    max_tok_s, max_conc = 0.0, 0
    ok = [o for o in outputs if o.success]
    if ok:
        start = min(o.start_time for o in ok)
        end = max(o.start_time + o.latency for o in ok)
        buckets = int(math.ceil(end - start)) + 1
        tok_per_s, conc_per_s = [0] * buckets, [0] * buckets
        for o in ok:
            t = o.start_time + o.ttft
            times = [t]
            for gap in o.itl:
                t += gap
                times.append(t)
            for t in times:
                b = int(t - start)
                if 0 <= b < buckets:
                    tok_per_s[b] += 1
            for s in range(
                int(o.start_time - start), min(int(o.start_time + o.latency - start) + 1, buckets)
            ):
                conc_per_s[s] += 1
        max_tok_s, max_conc = float(max(tok_per_s)), int(max(conc_per_s))
    total_output = sum(output_lens)
    m = {
        "completed": completed,
        "total_input": total_input,
        "total_output": total_output,
        "total_output_retokenized": sum(retok),
        "request_throughput": completed / dur_s,
        "input_throughput": total_input / dur_s,
        "output_throughput": total_output / dur_s,
        "total_throughput": (total_input + total_output) / dur_s,
        "concurrency": sum(e2e) / dur_s,
        "max_output_tokens_per_s": max_tok_s,
        "max_concurrent_requests": max_conc,
    }
    m.update(_stats("ttft_ms", ttfts))
    m.update(_stats("tpot_ms", tpots))
    m.update(_stats("itl_ms", itls))
    m.update(_stats("e2e_latency_ms", e2e, zero_if_empty=False))
    return m, output_lens


# ----------------------------------------------------------------------------- driver


class _Progress:
    def __init__(self, total, disable):
        self.total, self.done, self.disable = total, 0, disable
        self.lock = threading.Lock()
        self.start = time.perf_counter()

    def update(self):
        with self.lock:
            self.done += 1
            if self.disable:
                return
            elapsed = time.perf_counter() - self.start
            filled = int(10 * self.done / self.total) if self.total else 10
            rate = self.done / elapsed if elapsed > 0 else 0.0
            sys.stderr.write(
                "\r%3d%%|%s%s| %d/%d [%s<00:00, %5.2fit/s]"
                % (
                    100 * self.done // max(self.total, 1),
                    "\u2588" * filled,
                    " " * (10 - filled),
                    self.done,
                    self.total,
                    time.strftime("%M:%S", time.gmtime(elapsed)),
                    rate,
                )
            )
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def run_requests(
    args, api_url, rows, extra_body, request_rate, max_concurrency, rng, progress, output_cap=None
):
    outputs = [None] * len(rows)
    semaphore = threading.Semaphore(max_concurrency) if max_concurrency else None
    threads = []

    def work(i, row):
        if semaphore:
            semaphore.acquire()
        try:
            outputs[i] = request_once(
                args, api_url, row, min(row.output_len, output_cap or row.output_len), extra_body
            )
        finally:
            if semaphore:
                semaphore.release()
            if progress:
                progress.update()

    for i, row in enumerate(rows):
        t = threading.Thread(target=work, args=(i, row), daemon=True)
        t.start()
        threads.append(t)
        if request_rate != float("inf") and i + 1 < len(rows):
            time.sleep(rng.expovariate(request_rate))
    for t in threads:
        t.join()
    return outputs


def wait_for_endpoint(url, args, timeout_sec=60):
    print(f"Waiting up to {timeout_sec}s for {url} to become ready...")
    start = time.perf_counter()
    while True:
        try:
            status, _ = http_get(url, args, timeout=5)
            if status == 200:
                print(f"Server ready in {time.perf_counter() - start:.1f}s.")
                return True
        except OSError:
            pass
        if time.perf_counter() - start >= timeout_sec:
            print(f"Server did not become ready within {timeout_sec}s timeout.")
            return False
        time.sleep(1)


def benchmark(args, base_url, api_url, rows, extra_body):
    print(f"Starting warmup with {args.warmup_requests} sequences...")
    if args.warmup_requests > 0:
        warm = run_requests(
            args,
            api_url,
            [rows[0]] * args.warmup_requests,
            extra_body,
            float("inf"),
            args.max_concurrency,
            random.Random(0),
            None,
            output_cap=32,
        )
        if not any(o.success for o in warm):
            raise ValueError(
                "Warmup failed - Please make sure benchmark arguments are correctly specified. "
                f"Error: {warm[0].error}"
            )
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if args.flush_cache:
        conn, path = _connection(base_url + "/flush_cache", timeout=args.flush_cache_timeout)
        try:
            conn.request("POST", path, headers=_headers(args))
            conn.getresponse().read()
        finally:
            conn.close()
    time.sleep(0.2)

    start = time.perf_counter()
    progress = _Progress(len(rows), args.disable_tqdm)
    outputs = run_requests(
        args,
        api_url,
        rows,
        extra_body,
        args.request_rate,
        args.max_concurrency,
        random.Random(args.seed),
        progress,
    )

    accept_length = None
    if "sglang" in args.backend:
        status, text = http_get(base_url + "/server_info", args)
        if status == 200:
            info = json.loads(text)
            states = info.get("internal_states") or []
            if states:
                accept_length = states[0].get("avg_spec_accept_length", None)
    duration = time.perf_counter() - start
    metrics, output_lens = calculate_metrics(rows, outputs, duration)
    print_summary(args, metrics, duration, accept_length)

    status, text = http_get(base_url + "/server_info", args)
    server_info = json.loads(text) if status == 200 else None
    result = {
        "tag": args.tag,
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "server_info": server_info,
        "duration": duration,
        "completed": metrics["completed"],
        "total_input_tokens": metrics["total_input"],
        "total_input_text_tokens": metrics["total_input"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": metrics["total_output"],
        "total_output_tokens_retokenized": metrics["total_output_retokenized"],
    }
    for key in ("request_throughput", "input_throughput", "output_throughput", "total_throughput"):
        result[key] = metrics[key]
    for name in ("e2e_latency_ms", "ttft_ms", "tpot_ms", "itl_ms"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            result[f"{stat}_{name}"] = metrics[f"{stat}_{name}"]
    result["concurrency"] = metrics["concurrency"]
    result["accept_length"] = accept_length
    result["max_output_tokens_per_s"] = metrics["max_output_tokens_per_s"]
    result["max_concurrent_requests"] = metrics["max_concurrent_requests"]

    if args.output_file:
        output_file = args.output_file
    else:
        now = datetime.now().strftime("%m%d")
        if args.dataset_name.startswith("random"):
            lens = f"{args.random_input_len}_{args.random_output_len}"
            output_file = f"{args.backend}_{now}_{args.num_prompts}_{lens}.jsonl"
        else:
            output_file = f"{args.backend}_{now}_{args.num_prompts}_{args.dataset_name}.jsonl"
    details = {
        "input_lens": [o.prompt_len for o in outputs],
        "output_lens": output_lens,
        "ttfts": [o.ttft for o in outputs],
        "itls": [o.itl for o in outputs],
        "generated_texts": [o.generated_text for o in outputs],
        "errors": [o.error for o in outputs],
    }
    dump = dict(result)
    if args.output_details:
        dump.update(details)
    with open(output_file, "a") as f:
        f.write(json.dumps(dump) + "\n")
    result.update(details)
    return result


def print_summary(args, m, duration, accept_length):
    row = "{:<40} {:<10}".format
    rowf = "{:<40} {:<10.2f}".format
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(row("Backend:", args.backend))
    print(row("Traffic request rate:", args.request_rate))
    print(row("Max request concurrency:", args.max_concurrency if args.max_concurrency else "not set"))
    print(row("Successful requests:", m["completed"]))
    print(rowf("Benchmark duration (s):", duration))
    print(row("Total input tokens:", m["total_input"]))
    print(row("Total input text tokens:", m["total_input"]))
    print(row("Total generated tokens:", m["total_output"]))
    print(row("Total generated tokens (retokenized):", m["total_output_retokenized"]))
    print(rowf("Request throughput (req/s):", m["request_throughput"]))
    print(rowf("Input token throughput (tok/s):", m["input_throughput"]))
    print(rowf("Output token throughput (tok/s):", m["output_throughput"]))
    print(rowf("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"]))
    print(row("Peak concurrent requests:", m["max_concurrent_requests"]))
    print(rowf("Total token throughput (tok/s):", m["total_throughput"]))
    print(rowf("Concurrency:", m["concurrency"]))
    if accept_length:
        print(rowf("Accept length:", accept_length))
    print("{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"))
    for stat, label in (
        ("mean", "Mean"),
        ("median", "Median"),
        ("p90", "P90"),
        ("p95", "P95"),
        ("p99", "P99"),
    ):
        print(rowf(f"{label} E2E Latency (ms):", m[f"{stat}_e2e_latency_ms"]))
    sections = (
        ("Time to First Token", "ttft_ms", "TTFT"),
        ("Time per Output Token (excl. 1st token)", "tpot_ms", "TPOT"),
        ("Inter-Token Latency", "itl_ms", "ITL"),
    )
    for title, key, label in sections:
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat, name in (
            ("mean", "Mean"),
            ("median", "Median"),
            ("p90", "P90"),
            ("p95", "P95"),
            ("p99", "P99"),
        ):
            print(rowf(f"{name} {label} (ms):", m[f"{stat}_{key}"]))
        if key == "itl_ms":
            print(rowf("Max ITL (ms):", m["max_itl_ms"]))
    print("=" * 50)


def run_benchmark(args):
    print(f"benchmark_args={args}")
    random.seed(args.seed)
    extra_body = json.loads(args.extra_request_body) if args.extra_request_body else {}
    if args.backend not in _BACKEND_API_PATHS:
        print(f"Backend {args.backend!r} is not supported by the simulated bench_serving.")
        sys.exit(1)
    if args.port is None:
        args.port = {
            "sglang": 30000,
            "sglang-native": 30000,
            "sglang-oai": 30000,
            "lmdeploy": 23333,
            "vllm": 8000,
        }.get(args.backend, 30000)
    if args.base_url:
        base_url = args.base_url.rstrip("/")
    else:
        host = f"[{args.host}]" if ":" in args.host else args.host
        base_url = f"http://{host}:{args.port}"
    model_url = f"{base_url}/v1/models"
    api_url = f"{base_url}{_BACKEND_API_PATHS[args.backend]}"

    if args.ready_check_timeout_sec > 0:
        if not wait_for_endpoint(model_url, args, args.ready_check_timeout_sec):
            print(f"Server at {model_url} is not ready. Exiting.")
            sys.exit(1)
    if args.model is None:
        try:
            status, text = http_get(model_url, args)
            models = json.loads(text).get("data", [])
            args.model = models[0]["id"] if models else None
        except Exception as e:
            print(f"Failed to fetch model from {model_url}. Error: {e}")
            print("Please specify the correct host and port using `--host` and `--port`.")
            sys.exit(1)
    if args.model is None:
        print("No model specified or found. Please provide a model using `--model`.")
        sys.exit(1)
    print(f"{args}\n")
    rows = get_dataset(args, random.Random(args.seed))
    return benchmark(args, base_url, api_url, rows, extra_body)


def cli_main(argv=None):
    parser = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    a = parser.add_argument
    a(
        "--backend",
        type=str,
        choices=BACKENDS,
        default="sglang",
        help="Must specify a backend, depending on the LLM Inference Engine.",
    )
    a("--base-url", type=str, default=None, help="Server or API base url if not using http host and port.")
    a("--host", type=str, default="0.0.0.0", help="Default host is 0.0.0.0.")
    a(
        "--port",
        type=int,
        help="If not set, the default port is configured according to its default value for "
        "different LLM Inference Engines.",
    )
    a("--ready-check-timeout-sec", type=int, default=60)
    a(
        "--dataset-name",
        type=str,
        default="sharegpt",
        choices=DATASETS,
        help="Name of the dataset to benchmark on.",
    )
    a("--dataset-path", type=str, default="", help="Path to the dataset.")
    a("--model", type=str, help="Name or path of the model.")
    a("--served-model-name", type=str)
    a(
        "--tokenizer",
        type=str,
        help="Name or path of the tokenizer (unused: the simulated tokenizer splits words).",
    )
    a("--num-prompts", type=int, default=1000, help="Number of prompts to process. Default is 1000.")
    a("--sharegpt-output-len", type=int, default=None)
    a("--sharegpt-context-len", type=int, default=None)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", type=int, default=1024)
    a("--random-range-ratio", type=float, default=0.0)
    a("--request-rate", type=float, default=float("inf"))
    a("--max-concurrency", type=int, default=None)
    a("--output-file", type=str, help="Output JSONL file name.")
    a("--output-details", action="store_true", help="Output details of benchmarking.")
    a("--disable-tqdm", action="store_true", help="Specify to disable tqdm progress bar.")
    a("--disable-stream", action="store_true", help="Disable streaming mode.")
    a("--return-logprob", action="store_true")
    a("--seed", type=int, default=42, help="The random seed.")
    a("--disable-ignore-eos", action="store_true", help="Disable ignoring EOS.")
    a("--temperature", type=float, default=0.0)
    a("--top-p", type=float, default=1.0)
    a("--extra-request-body", metavar='{"key1": "value1", "key2": "value2"}', type=str, default=None)
    a("--apply-chat-template", action="store_true")
    a("--profile", action="store_true")
    a("--flush-cache", action="store_true", help="Flush the cache before running the benchmark")
    a("--flush-cache-timeout", type=float, default=60.0)
    a("--warmup-requests", type=int, default=1, help="Number of warmup requests to run before the benchmark")
    a("--tokenize-prompt", action="store_true")
    a("--gsp-num-groups", type=int, default=64)
    a("--gsp-prompts-per-group", type=int, default=16)
    a("--gsp-system-prompt-len", type=int, default=2048)
    a("--gsp-question-len", type=int, default=128)
    a("--gsp-output-len", type=int, default=256)
    a("--tag", type=str, default=None, help="The tag to be dumped to output.")
    a("--header", type=str, nargs="+", default=None)
    args = parser.parse_args(argv)
    if args.profile:
        print("WARNING: --profile is ignored by the simulated bench_serving.")
    run_benchmark(args)


if __name__ == "__main__":
    cli_main()
