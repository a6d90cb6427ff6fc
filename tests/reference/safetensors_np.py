"""safetensors_np.py — read and write Hugging Face .safetensors files with numpy only.

Format: 8-byte little-endian header length N, then N bytes of JSON
  {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
   "__metadata__": {"key": "value", ...}}
(padded with spaces), then the raw little-endian tensor bytes; data_offsets are
relative to the first byte after the header.

read_safetensors(path)            -> (dict name -> np.ndarray, metadata dict)
load_safetensors(path)            -> dict name -> np.ndarray
write_safetensors(path, tensors, metadata=None, dtype=None)

Reading converts BF16 to float32 (exactly); F16/F32/F64 and integer types are
returned in their own dtype. Writing keeps each array's dtype (float32, float64,
float16, int32, int64, ...) unless `dtype` is given ("F32", "F64", "F16", "BF16").
"""
import json
import os
import struct

import numpy as np

# safetensors dtype string -> numpy little-endian dtype (BF16 handled separately)
_NP_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_ST_NAMES = {np.dtype(v).newbyteorder("<"): k for k, v in _NP_DTYPES.items()}


def bf16_bits_to_f32(bits):
    """uint16 bfloat16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bfloat16 bit patterns, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded[nan] = 0x7FC0
    return rounded


def read_header(path):
    """Return (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data_size = size - 8 - n
    for name, info in header.items():
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= data_size):
            raise ValueError(f"{path}: tensor {name} offsets {b},{e} outside data ({data_size} bytes)")
    return header, meta, 8 + n


def read_safetensors(path, names=None):
    """Read every tensor (or only `names`) of a file. Returns (tensors, metadata)."""
    header, meta, start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            b, e = info["data_offsets"]
            shape = tuple(int(s) for s in info["shape"])
            f.seek(start + b)
            buf = f.read(e - b)
            dt = info["dtype"]
            if dt == "BF16":
                arr = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2"))
            elif dt in _NP_DTYPES:
                arr = np.frombuffer(buf, dtype=_NP_DTYPES[dt]).copy()
            else:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if arr.size != count:
                raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
            out[name] = arr.reshape(shape)
    return out, meta


def load_safetensors(path, names=None):
    return read_safetensors(path, names)[0]


def load_hf_dir_weights(directory):
    """Weights of a Hugging Face model directory: model.safetensors or the sharded
    model.safetensors.index.json form."""
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(single):
        return load_safetensors(single)
    index = os.path.join(directory, "model.safetensors.index.json")
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for fname in sorted(set(weight_map.values())):
        wanted = {n for n, v in weight_map.items() if v == fname}
        out.update(load_safetensors(os.path.join(directory, fname), wanted))
    return out


def write_safetensors(path, tensors, metadata=None, dtype=None):
    """Write a dict name -> array (insertion order kept). `dtype`: None keeps each
    array's dtype; else one of "F64", "F32", "F16", "BF16" for every float tensor."""
    header = {}
    blobs = []
    offset = 0
    for name, value in tensors.items():
        a = np.asarray(value)
        if dtype is not None and a.dtype.kind == "f":
            if dtype == "BF16":
                st_dtype, data = "BF16", f32_to_bf16_bits(a).astype("<u2")
            else:
                st_dtype, data = dtype, a.astype(_NP_DTYPES[dtype])
        else:
            key = a.dtype.newbyteorder("<")
            if key not in _ST_NAMES:
                raise ValueError(f"tensor {name}: unsupported dtype {a.dtype}")
            st_dtype, data = _ST_NAMES[key], a.astype(key)
        raw = np.ascontiguousarray(data).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {str(k): str(v) for k, v in (metadata or {"format": "pt"}).items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)
