"""What the simulated model answers: greedy tokens and their logprobs, a pure function of the prompt and the
tokens so far (no weights, no GPU). Same prompt, same answer, in any server run and any batch.

Per position: a seeded hash of the context gives pseudo-logits over a small vocabulary (`SIM_VOCAB` ids);
log-softmax gives the logprobs; greedy takes the argmax. The attention kernels' numerics perturb the logits:

- `kernels.KV_SCALE` (1.0 as shipped): the scale the kernels apply to the KV rows they read; any other value
  shifts every logit by a pseudo-random amount proportional to the error (a wrong kernel: logprobs move
  everywhere and tokens that are no tie flip);
- a reduction-order noise of `REDUCTION_NOISE` per attention backend (each backend sums in its own order, so
  two backends agree up to near-ties, as bf16 kernels do).
"""

import hashlib
import math
import struct

SIM_VOCAB = [1000 + 97 * k for k in range(64)]  # the ids the simulated model ever generates
LOGIT_RANGE = 10.0  # pseudo-logits are spread over [0, LOGIT_RANGE)
KV_ERROR_GAIN = 25.0  # logit shift per unit of KV scale error (at most, per token)
REDUCTION_NOISE = 1e-3  # the largest logit difference two backends' summation orders make
MIN_LOGPROB = -30.0  # an input token outside SIM_VOCAB (input logprobs only)


def _kv_scale():
    from sglang._sim import kernels  # the kernels' constant as the (maybe patched) checkout has it

    return float(getattr(kernels, "KV_SCALE", 1.0))


def _unit(digest):
    """64 bytes -> 64 numbers in [-1, 1]."""
    return [b / 127.5 - 1.0 for b in digest[: len(SIM_VOCAB)]]


def start_state(prompt):
    """The hash state of a prompt: a list of token ids, or a text."""
    if isinstance(prompt, str):
        data = b"text\0" + prompt.encode("utf-8", "replace")
    else:
        data = b"ids\0" + struct.pack("<%dq" % len(prompt), *[int(t) for t in prompt])
    return hashlib.sha256(data).digest()


def next_state(state, token):
    return hashlib.sha256(state + struct.pack("<q", int(token))).digest()


def logprobs_at(state, backend, kv_scale):
    """Log-softmax over SIM_VOCAB at one position (a list, SIM_VOCAB's order)."""
    base = hashlib.blake2b(state, digest_size=64, person=b"sim-logits").digest()
    logits = [(b / 256.0) * LOGIT_RANGE for b in base[: len(SIM_VOCAB)]]
    if kv_scale != 1.0:
        shift = _unit(hashlib.blake2b(state, digest_size=64, person=b"sim-kv-error").digest())
        logits = [x + (kv_scale - 1.0) * KV_ERROR_GAIN * s for x, s in zip(logits, shift)]
    if backend:
        key = hashlib.sha256(backend.encode()).digest()[:16]
        noise = _unit(hashlib.blake2b(state, digest_size=64, key=key, person=b"sim-reduction").digest())
        logits = [x + REDUCTION_NOISE * n for x, n in zip(logits, noise)]
    top = max(logits)
    log_z = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - log_z for x in logits]


class Generation:
    """One request's greedy continuation, computed as far as asked (streaming asks again and again)."""

    def __init__(self, prompt, backend=None):
        self.prompt = prompt
        self.backend = backend or ""
        self.kv_scale = _kv_scale()
        self.state = start_state(prompt)
        self.tokens = []
        self.logprobs = []  # per position: the full log-softmax (SIM_VOCAB's order)

    def extend(self, n):
        while len(self.tokens) < n:
            lps = logprobs_at(self.state, self.backend, self.kv_scale)
            k = max(range(len(lps)), key=lambda i: (lps[i], -i))
            self.tokens.append(SIM_VOCAB[k])
            self.logprobs.append(lps)
            self.state = next_state(self.state, SIM_VOCAB[k])
        return self.tokens[:n]

    def output_token_logprobs(self, n):
        """SGLang's [logprob, token_id, text] per output token (text null: return_text_in_logprobs off)."""
        self.extend(n)
        return [[lps[SIM_VOCAB.index(t)], t, None] for t, lps in zip(self.tokens[:n], self.logprobs[:n])]

    def output_top_logprobs(self, n, k):
        self.extend(n)
        out = []
        for lps in self.logprobs[:n]:
            order = sorted(range(len(lps)), key=lambda i: (-lps[i], i))[: max(0, k)]
            out.append([[lps[i], SIM_VOCAB[i], None] for i in order])
        return out

    def input_logprobs(self, start, k):
        """SGLang's input_token_logprobs and input_top_logprobs from `start` (-1: the last input token only). The
        first entry has no logprob (nothing predicts it); a token outside SIM_VOCAB gets MIN_LOGPROB."""
        ids = list(self.prompt) if not isinstance(self.prompt, str) else []
        if not ids:
            return [], []
        start = len(ids) - 1 if start is None or start < 0 or start >= len(ids) else start
        token_lps, tops = [[None, ids[start], None]], [None]
        state = start_state(ids[:start + 1]) if start + 1 < len(ids) else None
        for pos in range(start + 1, len(ids)):
            lps = logprobs_at(state, self.backend, self.kv_scale)
            t = ids[pos]
            token_lps.append([lps[SIM_VOCAB.index(t)] if t in SIM_VOCAB else MIN_LOGPROB, t, None])
            order = sorted(range(len(lps)), key=lambda i: (-lps[i], i))[: max(0, k)]
            tops.append([[lps[i], SIM_VOCAB[i], None] for i in order] if k > 0 else None)
            state = next_state(state, t)
        return token_lps, tops
