"""A tiny stand-in for ``torch``: tensors that have a shape and a dtype but no data.

Operations that would move memory on a GPU charge simulated device time to a
global meter (``cuda.meter``), so a forward pass costs what the code does:

* ``t.to(other_dtype)`` reads and writes the whole tensor at copy bandwidth (a cast
  of a full KV pool is expensive, a no-op cast is free);
* ``t[index_tensor]`` gathers rows;
* slicing and ``view`` are free.

Kernels (fake flashinfer and friends) charge their own time with ``cuda.meter.charge``.
"""

import builtins as _builtins
import math

# Elementwise copies/casts are memory bound: they run at this share of the GPU's
# HBM bandwidth (about 1.3 TB/s on an RTX PRO 6000, 3.4 TB/s on an H200).
COPY_EFFICIENCY = 0.7
_copy_bandwidth = []


def copy_bandwidth():
    """Bytes per simulated second moved by a copy or cast kernel."""
    if not _copy_bandwidth:
        from sglang._sim.gpus import load_facts
        from sglang._sim.kernels import HBM_BANDWIDTH

        _copy_bandwidth.append(HBM_BANDWIDTH.get(load_facts()["arch"], 4.8e12) * COPY_EFFICIENCY)
    return _copy_bandwidth[0]


class dtype(object):
    def __init__(self, name, bits, is_floating_point=True):
        self.name = name
        self.bits = bits
        self.is_floating_point = is_floating_point

    @property
    def itemsize(self):
        return self.bits / 8.0

    def __repr__(self):
        return "torch." + self.name

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


float32 = dtype("float32", 32)
float16 = dtype("float16", 16)
bfloat16 = dtype("bfloat16", 16)
float8_e4m3fn = dtype("float8_e4m3fn", 8)
float8_e5m2 = dtype("float8_e5m2", 8)
float4_e2m1fn_x2 = dtype("float4_e2m1fn_x2", 4)
uint8 = dtype("uint8", 8, False)
int32 = dtype("int32", 32, False)
int64 = dtype("int64", 64, False)
float = float32
half = float16
int = int32  # noqa: A001 - mimics torch.int
long = int64

_DTYPES = {
    d.name: d
    for d in (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float4_e2m1fn_x2, uint8, int32, int64)
}


def _dtype_by_name(name):
    return _DTYPES[name]


class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"


class _Meter(object):
    """Accumulates simulated device seconds, by kind (cast, gather, attention, ...)."""

    def __init__(self):
        self.totals = {}

    def reset(self):
        self.totals = {}

    def charge(self, kind, seconds):
        self.totals[kind] = self.totals.get(kind, 0.0) + seconds

    def total(self):
        return sum(self.totals.values())

    def snapshot(self):
        return dict(self.totals)


class _Cuda(object):
    meter = _Meter()

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def synchronize():
        return None

    @staticmethod
    def get_device_capability(device=None):
        from sglang._sim.gpus import device_capability

        return device_capability()

    @staticmethod
    def get_device_name(device=None):
        from sglang._sim.gpus import load_facts

        return load_facts()["name"]


cuda = _Cuda()


class Size(tuple):
    def __repr__(self):
        return "torch.Size([%s])" % ", ".join(str(d) for d in self)


class Tensor(object):
    """Shape + dtype (+ optional small list of values for index tensors)."""

    def __init__(self, shape, dtype=float32, device="cuda", data=None):
        self.shape = Size(shape)
        self.dtype = dtype
        self.device = device
        self.data = data

    def __repr__(self):
        return "Tensor(shape=%s, dtype=%r)" % (list(self.shape), self.dtype)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def tolist(self):
        return list(self.data) if self.data is not None else [0] * self.numel()

    def to(self, target, non_blocking=False):
        if not isinstance(target, dtype) or target is self.dtype:
            return self
        cuda.meter.charge("cast", self.numel() * (self.dtype.itemsize + target.itemsize) / copy_bandwidth())
        return Tensor(self.shape, target, self.device, self.data)

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if -1 in shape:
            known = 1
            for d in shape:
                if d != -1:
                    known *= d
            shape[shape.index(-1)] = self.numel() // max(known, 1)
        return Tensor(shape, self.dtype, self.device, self.data)

    reshape = view

    def contiguous(self):
        return self

    def new_empty(self, shape, dtype=None):
        return Tensor(shape, dtype or self.dtype, self.device)

    def __getitem__(self, index):
        if isinstance(index, Tensor):  # gather rows
            rows = index.numel()
            row = Tensor(self.shape[1:], self.dtype)
            cuda.meter.charge("gather", 2 * rows * row.nbytes / copy_bandwidth())
            return Tensor((rows,) + tuple(self.shape[1:]), self.dtype, self.device)
        if not isinstance(index, tuple):
            index = (index,)
        shape = []
        dims = list(self.shape)
        for i, item in enumerate(index):
            if item is Ellipsis:
                raise NotImplementedError("Ellipsis indexing is not simulated")
            if isinstance(item, slice):
                shape.append(len(range(*item.indices(dims[i]))))
            elif isinstance(item, _builtins.int):
                continue
            else:
                raise TypeError("unsupported index %r" % (item,))
        shape.extend(dims[len(index) :])
        return Tensor(shape, self.dtype, self.device)


def empty(*shape, **kwargs):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(shape, kwargs.get("dtype", float32), kwargs.get("device", "cuda"))


zeros = empty
ones = empty


def tensor(values, dtype=int32, device="cuda"):
    values = list(values)
    return Tensor((len(values),), dtype, device, values)


def arange(start, end=None, dtype=int32, device="cuda"):
    if end is None:
        start, end = 0, start
    return tensor(range(start, end), dtype, device)


def cumsum(t, dim=0):
    total, out = 0, []
    for v in t.tolist():
        total += v
        out.append(total)
    return tensor(out, t.dtype, t.device)


def cat(tensors, dim=-1):
    first = tensors[0]
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return Tensor(shape, first.dtype, first.device)


def ceil_div(a, b):
    return _builtins.int(math.ceil(a / b))
