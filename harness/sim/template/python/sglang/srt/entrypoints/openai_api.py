"""OpenAI-compatible /v1/completions and /v1/chat/completions."""

import json
import time
import uuid

from sglang.srt.managers.tokenizer_manager import count_tokens, detokenize


def _finish(reason):
    if reason is None:
        return None, None
    return reason["type"], reason.get("matched")


class OpenAIServing:
    def __init__(self, global_state, submit, wait_outputs, error):
        self.state = global_state
        self.submit = submit
        self.wait_outputs = wait_outputs
        self.error = error

    def _sampling(self, body):
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        return {
            "max_new_tokens": 16 if max_tokens is None and "messages" not in body else max_tokens,
            "temperature": body.get("temperature", 1.0),
            "ignore_eos": body.get("ignore_eos", False),
        }

    def _serve(self, h, prompt_tokens, body, chat):
        tm = self.state.tokenizer_manager
        prompt = body.get("prompt")
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in body.get("messages") or [] if isinstance(m, dict))
        state, err = self.submit(prompt_tokens, self._sampling(body), prompt if isinstance(prompt, (str, list)) else None)
        if err:
            return self.error(h, err)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or self.state.server_args.served_model_name
        obj = "chat.completion" if chat else "text_completion"

        def usage(n):
            return {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + n,
                "completion_tokens": n,
                "prompt_tokens_details": None,
            }

        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            h.start_stream()
            sent, n = 0, 0
            try:
                for n, reason in self.wait_outputs(state):
                    delta = detokenize(state.rid, n)[len(detokenize(state.rid, sent)) :]
                    sent = n
                    finish, matched = _finish(reason)
                    choice = {"index": 0, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
                    if chat:
                        choice["delta"] = {"role": "assistant", "content": delta}
                    else:
                        choice["text"] = delta
                    chunk = {
                        "id": rid,
                        "object": obj + ".chunk" if chat else obj,
                        "created": created,
                        "model": model,
                        "choices": [choice],
                        "usage": None,
                    }
                    h.write_event(json.dumps(chunk).encode("utf-8"))
                if include_usage:
                    chunk = {
                        "id": rid,
                        "object": obj + ".chunk" if chat else obj,
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage(n),
                    }
                    h.write_event(json.dumps(chunk).encode("utf-8"))
                h.write_event(b"[DONE]")
                h.end_stream()
            except (BrokenPipeError, ConnectionResetError):
                tm.abort(state.rid)
                h.close_connection = True
            finally:
                tm.release(state.rid)
            return

        n, reason = 0, None
        for n, reason in self.wait_outputs(state):
            pass
        tm.release(state.rid)
        finish, matched = _finish(reason)
        text = detokenize(state.rid, n)
        choice = {"index": 0, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        if chat:
            choice["message"] = {
                "role": "assistant",
                "content": text,
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = text
        h.send_json(
            200,
            {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage(n),
            },
        )

    def completions(self, h):
        body = h._body()
        prompt = body.get("prompt")
        if prompt is None:
            return self.error(h, "prompt is required")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list):
            if len(prompt) != 1:
                return self.error(h, "The simulated target serves one prompt per request.")
            prompt_tokens = count_tokens(prompt[0])
        else:
            prompt_tokens = count_tokens(prompt)
        self._serve(h, prompt_tokens, body, chat=False)

    def chat_completions(self, h):
        body = h._body()
        messages = body.get("messages")
        if not messages:
            return self.error(h, "messages is required")
        tokens = 0
        for message in messages:
            content = message.get("content") or ""
            if isinstance(content, list):
                content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            tokens += count_tokens(content) + 4  # chat template overhead
        self._serve(h, tokens, body, chat=True)
