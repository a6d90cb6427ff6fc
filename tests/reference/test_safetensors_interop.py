#!/usr/bin/python3
"""tests/reference/test_safetensors_interop.py — checks our safetensors code against an
independent implementation of the format written here in Python/numpy.

1. A pure-Python writer makes a file of random tensors in F32, BF16 (given as
   uint16 bits), F16 and F64, with awkward values (subnormals, inf, NaN, -0), data
   laid out in a different order than the header lists them, and __metadata__ last.
2. tests/drivers/st_roundtrip_main.c (compiled here with mpicc into build/) reads it with
   st_open/st_read_f32 and writes everything back with st_write_f32 as F32.
3. A pure-Python parser checks the output's layout (8-byte padded header, metadata,
   contiguous offsets, exact file size) and its values against numpy's (and torch's,
   for bf16) conversions, bit for bit.
Run from the repository root: /usr/bin/python3 tests/reference/test_safetensors_interop.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

failures = 0


def check(cond, name, detail=""):
    global failures
    if cond:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def build_driver():
    os.makedirs("build", exist_ok=True)
    exe = "build/st_roundtrip"
    cmd = ["mpicc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-Isrc",
           "-I/usr/include/cjson", "-o", exe, "tests/drivers/st_roundtrip_main.c",
           "src/io/safetensors_open.c", "src/io/safetensors_read.c", "src/io/safetensors_write.c", "src/util.c", "src/util_fs.c", "-lcjson", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, "compile tests/drivers/st_roundtrip_main.c", r.stderr[-2000:])
    return exe if r.returncode == 0 else None


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, dtype string, shape, raw little-endian bytes)."""
    # Data in reverse order of the header entries: readers must follow the offsets.
    offsets, blob = {}, b""
    for name, _, _, raw in reversed(tensors):
        offsets[name] = (len(blob), len(blob) + len(raw))
        blob += raw
    header = {}
    for name, dtype, shape, _ in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets[name])}
    header["__metadata__"] = metadata
    text = json.dumps(header).encode()  # with spaces after ':' and ',', unlike ours
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)


def read_safetensors(path):
    """Returns (header length, raw header bytes, ordered header items, data bytes)."""
    with open(path, "rb") as f:
        content = f.read()
    (n,) = struct.unpack("<Q", content[:8])
    raw = content[8:8 + n]
    items = json.loads(raw.decode(), object_pairs_hook=lambda pairs: pairs)
    return n, raw, items, content[8 + n:]


def make_inputs(rng):
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f32[0, 0], f32[0, 1], f32[0, 2] = np.float32(1e-40), -0.0, np.inf  # subnormal, -0, inf
    # bf16 as raw uint16 bits: random normals truncated, plus specials.
    bf_bits = (rng.standard_normal(28).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    bf_bits[:6] = [0x0001, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f7f]
    bf_bits = bf_bits.reshape(4, 7)
    f16 = (rng.standard_normal(24) * 100).astype(np.float16)
    f16[:6] = np.array([0x0001, 0x03ff, 0x8200, 0x7c00, 0x7e00, 0x7bff], np.uint16).view(np.float16)
    f16 = f16.reshape(2, 3, 4)
    f64 = np.concatenate([rng.standard_normal(4), [1e300, 1.0 / 3.0, 1e-50, -2.5]]).astype(np.float64)
    scalar = np.array(3.25, np.float32)
    empty = np.zeros((0, 3), np.float32)
    tensors = [
        ("model.layers.0.mlp.up_proj.weight", "F32", f32.shape, f32.tobytes()),
        ("lm_head.weight", "BF16", bf_bits.shape, bf_bits.astype("<u2").tobytes()),
        ("h16", "F16", f16.shape, f16.astype("<f2").tobytes()),
        ("d64", "F64", f64.shape, f64.astype("<f8").tobytes()),
        ("scalar", "F32", (), scalar.tobytes()),
        ("empty", "F32", empty.shape, empty.tobytes()),
    ]
    with np.errstate(over="ignore"):  # 1e300 -> inf on purpose
        f64_as_f32 = f64.astype(np.float32)
    expected = {
        "model.layers.0.mlp.up_proj.weight": f32,
        "lm_head.weight": (bf_bits.astype(np.uint32) << 16).view(np.float32),
        "h16": f16.astype(np.float32),
        "d64": f64_as_f32,
        "scalar": scalar,
        "empty": empty,
    }
    return tensors, expected, bf_bits


def same_bits(a, b):
    """Bit-equal, except that any NaN matches any NaN (payload handling may differ)."""
    a = np.ascontiguousarray(a, np.float32).ravel()
    b = np.ascontiguousarray(b, np.float32).ravel()
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and
                np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def main():
    exe = build_driver()
    if exe is None:
        return 1
    rng = np.random.default_rng(20240520)
    tensors, expected, bf_bits = make_inputs(rng)
    with tempfile.TemporaryDirectory(prefix="femtotron_interop_") as tmp:
        src, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        write_safetensors(src, tensors, {"format": "pt", "note": "python writer"})
        r = subprocess.run([exe, src, out], capture_output=True, text=True)
        check(r.returncode == 0, "C driver reads the Python-written file and writes it back",
              r.stderr[-2000:])
        if r.returncode != 0:
            return 1

        n, raw, items, data = read_safetensors(out)
        check(n % 8 == 0, "output header length is a multiple of 8", str(n))
        text = raw.decode()
        check(text.rstrip(" ") == text.strip() and text.rstrip(" ").endswith("}"),
              "output header is padded with spaces only")
        names = [k for k, _ in items]
        check(names[0] == "__metadata__", "__metadata__ comes first", str(names))
        meta = dict(items[0][1]) if names[0] == "__metadata__" else {}
        check(meta == {"format": "pt", "source": src}, "metadata is {format: pt, source: IN}", str(meta))
        check(names[1:] == [t[0] for t in tensors], "tensors keep the input file's order", str(names))

        pos, layout_ok = 0, True
        for name, entry in items[1:]:
            e = dict(entry)
            numel = int(np.prod(e["shape"])) if e["shape"] else 1
            layout_ok &= e["dtype"] == "F32" and e["data_offsets"] == [pos, pos + 4 * numel]
            pos += 4 * numel
        check(layout_ok, "every output tensor is F32 with contiguous offsets from 0")
        check(pos == len(data), "file size is exactly header + tensor bytes", f"{pos} vs {len(data)}")

        got = {}
        for name, entry in items[1:]:
            e = dict(entry)
            b, end = e["data_offsets"]
            got[name] = np.frombuffer(data[b:end], "<f4").reshape(e["shape"])
        for name, _, shape, _ in tensors:
            g = got.get(name)
            check(g is not None and tuple(g.shape) == tuple(shape),
                  f"{name}: shape {list(shape)} preserved", str(None if g is None else g.shape))
            check(g is not None and same_bits(g, expected[name]),
                  f"{name}: values equal numpy's fp32 conversion bit for bit")

        # A second, independent reference for bf16: torch's own conversion.
        try:
            import torch
            ref = torch.from_numpy(bf_bits.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
            check(same_bits(got["lm_head.weight"], ref), "lm_head.weight (BF16) equals torch's bf16 -> fp32")
            ref16 = torch.from_numpy(np.frombuffer(tensors[2][3], "<f2").copy()).float().numpy()
            check(same_bits(got["h16"], ref16), "h16 (F16, subnormals included) equals torch's fp16 -> fp32")
        except ImportError:
            check(False, "torch available for the bf16 cross-check", "import torch failed")

        # Our writer's output must also be readable by our own reader (idempotence).
        out2 = os.path.join(tmp, "out2.safetensors")
        r = subprocess.run([exe, out, out2], capture_output=True, text=True)
        with open(out, "rb") as f1, open(out2, "rb") as f2:
            a, b = f1.read(), f2.read()
        # Only the "source" metadata differs; the data sections must be identical.
        check(r.returncode == 0 and a[-len(data):] == b[-len(data):],
              "re-reading our own output gives identical tensor bytes")

        # A truncated file is rejected with a message naming it.
        cut = os.path.join(tmp, "cut.safetensors")
        with open(src, "rb") as f:
            content = f.read()
        with open(cut, "wb") as f:
            f.write(content[:-5])
        r = subprocess.run([exe, cut, out2], capture_output=True, text=True)
        check(r.returncode != 0 and cut in r.stderr and "past the end" in r.stderr,
              "truncated input: driver fails naming the file and the problem", r.stderr[-500:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
