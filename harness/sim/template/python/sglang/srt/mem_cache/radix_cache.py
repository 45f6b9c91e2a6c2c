"""Simulated prefix cache (SGLang's RadixCache, as the scheduler sees it): which leading tokens of a new
request are cached already.

A prompt is a chain of keys, one per token, each naming the whole prefix up to it (``prefix_keys``, made in the
tokenizer process, whose hashes are the only ones compared). A request's cached length is its longest prefix
whose key was inserted before, and never the whole prompt: SGLang always computes the last token again, so a
full hit is ``#new-token: 1``. ``reset`` is ``/flush_cache``. Like the real tree it holds what was prefilled
while the pool has room; past ``capacity`` keys the oldest prompts go first (SGLang's LRU eviction).
"""

from collections import OrderedDict


def prefix_keys(tokens):
    """One key per token: the hash of the prefix that ends there (same prefix, same key)."""
    keys, h = [], 0
    for tok in tokens:
        h = hash((h, tok))
        keys.append(h)
    return keys


class RadixCache(object):
    def __init__(self, capacity, disable=False):
        self.capacity = max(int(capacity), 1)
        self.disable = disable
        self._keys = OrderedDict()  # prefix key → None, oldest first

    def match_prefix(self, keys):
        """How many leading tokens are cached (at most len(keys) - 1)."""
        if self.disable:
            return 0
        n = 0
        for key in keys[:-1]:
            if key not in self._keys:
                break
            self._keys.move_to_end(key)
            n += 1
        return n

    def insert(self, keys):
        if self.disable:
            return
        for key in keys:
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def reset(self):
        self._keys.clear()
