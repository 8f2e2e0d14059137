#!/usr/bin/python3
"""Generate hashing/testdata/vectors.json: Dynamo-compatible block and
sequence hashes computed independently of this repository's Go code.

Run from the repository root (needs Debian's python3-xxhash, which wraps the
C libxxhash, so use Debian's /usr/bin/python3, not a pyenv/venv python):

    apt-get install -y python3-xxhash
    /usr/bin/python3 hashing/testdata/gen_vectors.py            # rewrite vectors.json
    /usr/bin/python3 hashing/testdata/gen_vectors.py --check    # verify it is up to date

Optionally, every xxh3 call made here is also re-computed with xxhash-rust,
the crate Dynamo itself links (Debian's librust-xxhash-rust-dev, built
offline with rustc):

    apt-get install -y librust-xxhash-rust-dev
    /usr/bin/python3 hashing/testdata/gen_vectors.py --check --rust

The byte layout below is transcribed from Dynamo's Rust sources, NOT from
hashing/*.go:

  * Block hash (LocalBlockHash), ai-dynamo/dynamo lib/kv-router/src/protocols.rs,
    compute_block_hash_for_seq (non-Eagle path):
      - only complete blocks: while start + kv_block_size <= len(tokens);
        kv_block_size == 0 gives no hashes;
      - bytes = tokens of the block as u32 little-endian;
      - if block_mm_infos[i] is Some(info): append sorted(mm_hash of
        info.mm_objects) as u64 little-endian (sort_unstable, duplicates kept);
      - hash = xxh3_64_with_seed(bytes, seed).
  * Seed: XXH3_SEED = 1337. With a non-empty lora_name the seed is
    1337.wrapping_add(xxh3_64(lora_name_utf8)) where xxh3_64 has seed 0
    (protocols.rs before dynamo_kv_hashing; dynamo_kv_hashing::compute_salt_hash
    after, same value when cache_namespace is absent). "" = no LoRA.
  * Sequence hash, compute_seq_hash_for_block:
      seq[0] = local[0];
      seq[i] = xxh3_64_with_seed(le_u64(seq[i-1]) || le_u64(local[i]), 1337).

Sources (ai-dynamo/dynamo, read for this file):
  - lib/kv-router/src/protocols.rs @ 038eab23a6b6e9b6391de6640f4f69d4c2726681
    (its hashing prelude - XXH3_SEED, BlockHashOptions, block_hash_seed - is
    line for line the one in the dynamo-kv-router 1.4.0 crate): block + multimodal
    layout as above; seed = dynamo_kv_hashing::compute_salt_hash(cache_namespace,
    lora_name); chain = dynamo_tokens::compute_next_sequence_hash over
    [parent LE || block LE]; test_router_event_new pins
    compute_block_hash(b"test data") == 13226331709069118873 (seed 1337);
    test_lora_hash_matches_kv_hashing_contract pins the LoRA block hash to
    xxh3(tokens, compute_salt_hash(None, lora)).
  - dynamo_kv_hashing::compute_salt_hash (lib/kv-hashing): seed =
    CHAIN_XXH3_SEED (1337); lora -> wrapping_add(xxh3(lora, 0)); cache_namespace
    -> wrapping_add(xxh3(ns, 1)) (not supported by this repository).
  - the earlier protocols.rs revision with BlockHashOptions {block_mm_infos,
    lora_name, is_eagle}: seed = XXH3_SEED.wrapping_add(xxh3::xxh3_64(name)) for a
    non-empty name; chain = compute_hash(le(parent) || le(block)), seed 1337.
  - lib/kv-router/src/protocols.rs @ cfa22544b95be056ab4f4b9b9e1762d8b56f6e59
    (pre-LoRA): same block/multimodal layout and chain, seed 1337.
  - docs/guides/kv_events_hashing.md @ 6f8e1f47d2b33e8731a0f7aa20f8c76871a31845:
    tokens [1,2,3,4], kv_block_size 4 -> 14643705804678351452.
Only the last value and "test data" are literal Dynamo outputs; the LoRA,
multimodal and chain vectors are computed here from the layout above.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import xxhash
except ImportError:  # pragma: no cover
    sys.exit("gen_vectors.py: needs Debian's python3-xxhash; run it with /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "vectors.json")
RUST_HELPER = os.path.join(HERE, "xxh3_rust_check.rs")

XXH3_SEED = 1337
U64 = (1 << 64) - 1

# Every (data, seed) -> hash this script computed, for the optional
# cross-check against xxhash-rust.
CALLS = {}


def xxh3(data: bytes, seed: int) -> int:
    h = xxhash.xxh3_64_intdigest(data, seed=seed)
    CALLS[(bytes(data), seed)] = h
    return h


def le_u32(values):
    out = bytearray()
    for v in values:
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError(f"token {v} is not a u32")
        out += v.to_bytes(4, "little")
    return bytes(out)


def le_u64(values):
    out = bytearray()
    for v in values:
        if not 0 <= v <= U64:
            raise ValueError(f"value {v} is not a u64")
        out += v.to_bytes(8, "little")
    return bytes(out)


def block_seed(lora_name):
    if lora_name:  # None and "" both mean the base model
        return (XXH3_SEED + xxh3(lora_name.encode("utf-8"), 0)) & U64
    return XXH3_SEED


def compute_block_hash_for_seq(tokens, kv_block_size, block_mm_infos=None, lora_name=None):
    """Dynamo's compute_block_hash_for_seq, non-Eagle. block_mm_infos is a
    list whose entry i is None (Rust None) or a list of mm_hash values (the
    mm_objects of Some(BlockExtraInfo)); entries past the last complete block
    are ignored, missing entries mean None."""
    if kv_block_size == 0:
        return []
    seed = block_seed(lora_name)
    hashes = []
    start = 0
    block_idx = 0
    while start + kv_block_size <= len(tokens):
        data = le_u32(tokens[start:start + kv_block_size])
        if block_mm_infos is not None and block_idx < len(block_mm_infos) \
                and block_mm_infos[block_idx] is not None:
            data += le_u64(sorted(block_mm_infos[block_idx]))
        hashes.append(xxh3(data, seed))
        start += kv_block_size
        block_idx += 1
    return hashes


def compute_seq_hash_for_block(block_hashes):
    if not block_hashes:
        return []
    seq = [block_hashes[0]]
    for h in block_hashes[1:]:
        seq.append(xxh3(le_u64([seq[-1], h]), XXH3_SEED))
    return seq


def lcg_tokens(n, seed, lo=0, hi=0xFFFFFFFF):
    """Deterministic pseudo-random u32 tokens in [lo, hi] (no dependency on
    Python's random module, whose algorithm could change)."""
    x = seed & U64
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & U64
        out.append(lo + (x >> 32) % (hi - lo + 1))
    return out


# Values literally published by Dynamo. The generator refuses to write a file
# if its own implementation disagrees with any of them.
PUBLISHED = [
    {
        "name": "dynamo_test_router_event_new",
        "source": "ai-dynamo/dynamo lib/kv-router/src/protocols.rs @ "
                  "038eab23a6b6e9b6391de6640f4f69d4c2726681, test_router_event_new: "
                  "LocalBlockHash(13226331709069118873) == compute_block_hash(b\"test data\")",
        "kind": "xxh3_seed_1337",
        "data": "test data",
        "expected": 13226331709069118873,
    },
    {
        "name": "dynamo_kv_events_hashing_doc",
        "source": "ai-dynamo/dynamo docs/guides/kv_events_hashing.md @ "
                  "6f8e1f47d2b33e8731a0f7aa20f8c76871a31845: "
                  "compute_block_hash_for_seq_py([1,2,3,4], 4)[0] == 14643705804678351452",
        "kind": "block_hashes",
        "tokens": [1, 2, 3, 4],
        "block_size": 4,
        "expected": [14643705804678351452],
    },
]


def check_published():
    for p in PUBLISHED:
        if p["kind"] == "xxh3_seed_1337":
            got = xxh3(p["data"].encode(), XXH3_SEED)
            ok = got == p["expected"]
        else:
            got = compute_block_hash_for_seq(p["tokens"], p["block_size"])
            ok = got == p["expected"]
        if not ok:
            sys.exit(f"gen_vectors.py: {p['name']}: computed {got}, Dynamo publishes {p['expected']}")


def cases():
    c = []

    def add(name, tokens, block_size, lora_name=None, extra_keys=None, note=None):
        blocks = compute_block_hash_for_seq(tokens, block_size, extra_keys, lora_name)
        case = {"name": name}
        if note:
            case["note"] = note
        case["block_size"] = block_size
        if lora_name is not None:
            case["lora_name"] = lora_name
        if extra_keys is not None:
            case["extra_keys"] = extra_keys
        case["tokens"] = tokens
        case["block_hashes"] = blocks
        case["sequence_hashes"] = compute_seq_hash_for_block(blocks)
        c.append(case)

    # Block sizes and partial-block handling (Dynamo's own test uses 11/32/64
    # with kv_block_size, +1 and 2*kv_block_size+1 tokens).
    add("empty", [], 16, note="no tokens, no blocks")
    add("block_size_zero", list(range(8)), 0, note="kv_block_size 0: no blocks")
    add("partial_only", list(range(15)), 16, note="15 tokens < one block of 16")
    add("bs1", [0, 1, 2, 3, 4], 1)
    add("bs4_published_tokens", [1, 2, 3, 4], 4)
    add("bs4_one_partial", [1, 2, 3, 4, 5, 6, 7], 4, note="trailing partial block ignored")
    for bs in (11, 32, 64):
        add(f"bs{bs}_exact", list(range(bs)), bs)
        add(f"bs{bs}_plus1", list(range(bs + 1)), bs)
        add(f"bs{bs}_two_plus1", list(range(2 * bs + 1)), bs)
    add("bs16_tokens_1_to_32", list(range(1, 33)), 16,
        note="the inputs of the old self-recorded vectors in vectors_test.go")
    add("bs16_ten_blocks", list(range(1000, 1165)), 16, note="10 blocks + 5 trailing tokens: long chain")
    add("bs128_two_blocks", lcg_tokens(256, 7, 0, 151935), 128, note="vocab-sized token ids")

    # Token value range: little-endian u32 encoding of large ids.
    add("large_u32_tokens", [0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0xDEADBEEF,
                             0x00000100, 0x01000000, 0xFFFFFFFE, 0], 4)
    add("random_u32_tokens", lcg_tokens(96, 42), 16)

    # LoRA salt.
    add("lora_adapter_a", [0, 1, 2, 3], 4, lora_name="adapter-a",
        note="Dynamo test_lora_hash_matches_kv_hashing_contract inputs")
    add("lora_adapter_b", [0, 1, 2, 3], 4, lora_name="adapter-b")
    add("lora_alpha_7b", list(range(1, 17)), 4, lora_name="alpha-7b",
        note="Dynamo producer_block_hash_matches_router_local_block_hash_lora inputs")
    add("lora_my_adapter_chain", list(range(8)), 4, lora_name="my-adapter")
    add("lora_empty_is_base", [0, 1, 2, 3], 4, lora_name="",
        note="empty lora_name is the base model (Dynamo filters empty names)")
    add("lora_utf8_name", lcg_tokens(48, 3, 0, 200000), 16, lora_name="llama-3-ädapter/日本語-v2",
        note="name hashed as UTF-8 bytes")
    add("lora_long_name", list(range(32)), 16, lora_name="org/" + "x" * 300 + "/lora",
        note="name longer than 240 bytes (xxh3 long-input path)")

    # Multimodal extra keys (block_mm_infos): per-block sorted mm_hash u64s.
    add("mm_second_block", list(range(7, 39)), 16, extra_keys=[None, [9, 3]],
        note="block 0 none, block 1 keys given unsorted")
    add("mm_sorted_same_as_unsorted", list(range(7, 39)), 16, extra_keys=[None, [3, 9]])
    add("mm_every_block", [5] * 12, 4, extra_keys=[[1], [2], [1 << 63, 0xFFFFFFFFFFFFFFFF, 0]])
    add("mm_duplicates_kept", list(range(8)), 4, extra_keys=[[7, 7], [7]],
        note="duplicate mm hashes are both appended")
    add("mm_empty_list_is_tokens_only", list(range(8)), 4, extra_keys=[[], None],
        note="Some(BlockExtraInfo{mm_objects: []}) appends nothing")
    add("mm_fewer_entries_than_blocks", list(range(12)), 4, extra_keys=[[42]],
        note="missing entries mean no extra keys")
    add("mm_entry_for_partial_block_ignored", list(range(10)), 4, extra_keys=[None, None, [99]],
        note="block 2 is partial: never hashed")
    add("mm_many_objects", lcg_tokens(64, 11, 0, 151935), 32,
        extra_keys=[lcg_tokens(5, 99), None],
        note="five mm hashes (here < 2^32 but encoded as u64)")
    add("mm_with_lora", list(range(16)), 8, lora_name="adapter-a",
        extra_keys=[[0x0123456789ABCDEF], [0xFEDCBA9876543210, 0x0123456789ABCDEF]])

    return c


def salted_seeds():
    names = ["", "adapter-a", "adapter-b", "alpha-7b", "my-adapter",
             "llama-3-ädapter/日本語-v2", "org/" + "x" * 300 + "/lora"]
    return [{"lora_name": n, "seed": block_seed(n)} for n in names]


def build():
    check_published()
    return {
        "comment": "Generated by hashing/testdata/gen_vectors.py with Debian python3-xxhash; "
                   "do not edit. Expected values follow Dynamo's kv-router byte layout "
                   "(see the generator's docstring for the exact sources).",
        "xxhash": {"python_xxhash": xxhash.VERSION, "libxxhash": xxhash.XXHASH_VERSION},
        "published": PUBLISHED,
        "salted_seeds": salted_seeds(),
        "cases": cases(),
    }


def render(doc):
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    # Keep lists of integers on one line: the file stays readable and diffable.
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text)
    return text + "\n"


def rust_cross_check():
    """Recompute every recorded xxh3 call with xxhash-rust (Dynamo's crate)."""
    src = "/usr/share/cargo/registry"
    crates = sorted(d for d in os.listdir(src) if d.startswith("xxhash-rust-")) if os.path.isdir(src) else []
    if not crates:
        sys.exit("--rust needs Debian's librust-xxhash-rust-dev")
    lib = os.path.join(src, crates[-1], "src", "lib.rs")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["rustc", "--edition", "2018", "--crate-type", "rlib", "--crate-name", "xxhash_rust",
                        "--cfg", 'feature="xxh3"', "-O", "--cap-lints", "allow", "-o",
                        os.path.join(tmp, "libxxhash_rust.rlib"), lib], check=True)
        exe = os.path.join(tmp, "check")
        subprocess.run(["rustc", "--edition", "2021", "-O", "-L", tmp, "--extern",
                        "xxhash_rust=" + os.path.join(tmp, "libxxhash_rust.rlib"), "-o", exe, RUST_HELPER],
                       check=True)
        items = sorted(CALLS.items())
        stdin = "".join(f"{seed} {data.hex()}\n" for (data, seed), _ in items)
        out = subprocess.run([exe], input=stdin, capture_output=True, text=True, check=True).stdout.split()
    if len(out) != len(items):
        sys.exit("rust helper returned a wrong number of lines")
    bad = [(k, h, int(r)) for (k, h), r in zip(items, out) if int(r) != h]
    if bad:
        sys.exit(f"xxhash-rust disagrees with libxxhash on {len(bad)} inputs, e.g. {bad[0]}")
    print(f"xxhash-rust ({crates[-1]}) agrees with libxxhash {xxhash.XXHASH_VERSION} on {len(items)} xxh3 calls")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if vectors.json is not what this script writes")
    ap.add_argument("--rust", action="store_true", help="also recompute every xxh3 call with xxhash-rust")
    args = ap.parse_args()
    doc = build()
    text = render(doc)
    if args.rust:
        rust_cross_check()
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("vectors.json is stale: rerun hashing/testdata/gen_vectors.py")
        print("vectors.json is up to date")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(doc['cases'])} cases")


if __name__ == "__main__":
    main()
