"""data_order.py — an independent reimplementation of femtotron's data-order rule
for llm.c token shards (no shuffle), written from the published text:

  Shard: 256 int32 header (header[0] = magic 20240520 with uint16 tokens or
  20240801 with uint32 tokens, header[1] = version, header[2] = token count), then
  the tokens. Shards are taken in lexicographic order of their paths. Shard f with
  n tokens holds floor((n - 1) / S) sequences; sequence j is tokens[j*S .. j*S + S]
  (S + 1 tokens: inputs are the first S, targets the last S); sequences never span
  two shards. Global sequence numbers run across shards in that order.
  Step t (from 0) uses global positions p = t*G .. t*G + G - 1 (G = global batch in
  sequences): without shuffle, sequence p mod N_seq.

Within a step the G sequences are processed as grad_acc_steps micro-batches of
micro_batch_size consecutive positions; the step's loss is the mean cross-entropy
over all G*S target tokens.
"""
import glob as _glob
import os

import numpy as np

HEADER_INTS = 256
MAGIC_U16 = 20240520
MAGIC_U32 = 20240801


def write_shard(path, tokens, wide=None, version=1):
    """Write an llm.c shard. wide=None: uint32 only if some token >= 65536."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if wide is None:
        wide = bool(tokens.size and tokens.max() >= 65536)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = MAGIC_U32 if wide else MAGIC_U16
    header[1] = version
    header[2] = tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u4" if wide else "<u2").tobytes())


def read_shard(path):
    """Tokens of one shard as an int64 array (header validated)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER_INTS * 4:
        raise ValueError(f"{path}: shorter than the 1024-byte header")
    header = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if header[0] == MAGIC_U16:
        dt, width = "<u2", 2
    elif header[0] == MAGIC_U32:
        dt, width = "<u4", 4
    else:
        raise ValueError(f"{path}: bad magic {header[0]}")
    n = int(header[2])
    if len(raw) != HEADER_INTS * 4 + n * width:
        raise ValueError(f"{path}: header says {n} tokens, file has {len(raw)} bytes")
    return np.frombuffer(raw[HEADER_INTS * 4:], dtype=dt).astype(np.int64)


def expand_paths(pattern):
    """A file path or a glob -> list of paths in lexicographic order."""
    if isinstance(pattern, (list, tuple)):
        paths = list(pattern)
    elif any(c in pattern for c in "*?["):
        paths = _glob.glob(pattern)
    else:
        paths = [pattern]
    if not paths:
        raise ValueError(f"no shard matches {pattern!r}")
    # Byte-wise order (what strcmp gives), also for non-ASCII names.
    return sorted(paths, key=lambda p: os.fsencode(p))


class ShardDataset:
    """Global sequences of a list of shards, S tokens per sequence (S+1 read)."""

    def __init__(self, pattern, S):
        self.S = int(S)
        self.paths = expand_paths(pattern)
        self.tokens = [read_shard(p) for p in self.paths]
        counts = [max(0, (t.size - 1) // self.S) for t in self.tokens]
        self.first_seq = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.n_seq = int(self.first_seq[-1])
        if self.n_seq == 0:
            raise ValueError("no shard holds a full sequence of S+1 tokens")

    def sequence(self, g):
        """Global sequence g -> (inputs (S,), targets (S,)) int64."""
        f = int(np.searchsorted(self.first_seq, g, side="right") - 1)
        j = g - int(self.first_seq[f])
        chunk = self.tokens[f][j * self.S: j * self.S + self.S + 1]
        assert chunk.size == self.S + 1
        return chunk[:-1].copy(), chunk[1:].copy()

    def sequence_at(self, p):
        """Global sequence used at global position p (no shuffle)."""
        return p % self.n_seq

    def step_sequences(self, t, G):
        """Global sequence numbers of step t (0-based), G sequences per step."""
        return [self.sequence_at(p) for p in range(t * G, t * G + G)]

    def step_batch(self, t, G):
        """Step t's global batch: inputs (G, S), targets (G, S), int64."""
        seqs = [self.sequence(g) for g in self.step_sequences(t, G)]
        return np.stack([s[0] for s in seqs]), np.stack([s[1] for s in seqs])

    def micro_batches(self, t, micro_batch_size, grad_acc_steps):
        """Step t split as femtotron processes it (1 rank): a list of grad_acc_steps
        (inputs (B, S), targets (B, S)) of consecutive positions."""
        B = micro_batch_size
        inputs, targets = self.step_batch(t, B * grad_acc_steps)
        return [(inputs[i * B:(i + 1) * B], targets[i * B:(i + 1) * B])
                for i in range(grad_acc_steps)]
