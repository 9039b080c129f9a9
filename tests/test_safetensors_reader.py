"""experiments/safetensors_reader.py: byte-exact reads of files written here with struct and
json, and a clear error for every kind of bad file."""
import json
import math
import struct

import numpy as np
import pytest

from experiments import safetensors_reader as st
from safetensors_files import tensor_bytes, write_raw, write_safetensors


def test_f32_round_trip_is_exact(tmp_path):
    values = [1.5, -2.0, 0.25, 3.0, 1e-30, -7.125]
    path = write_safetensors(tmp_path / "a.safetensors", {"w": ("F32", (2, 3), values)},
                             metadata={"format": "np"})
    f = st.SafetensorsFile(path)
    w = f.get("w")
    assert w.dtype == np.float32 and w.shape == (2, 3)
    np.testing.assert_array_equal(w, np.array(values, dtype=np.float32).reshape(2, 3))
    assert f.metadata == {"format": "np"} and f.names() == ["w"] and f.dtype("w") == "F32"
    assert not w.flags.writeable            # a view of the file, opened read-only


def test_f64_and_f16_round_trip(tmp_path):
    path = write_safetensors(tmp_path / "b.safetensors", {
        "d": ("F64", (3,), [math.pi, -1e300, 5e-324]),
        "h": ("F16", (2, 2), [0.5, -65504.0, 6e-8, 1.0009765625])})
    f = st.SafetensorsFile(path)
    assert f.get("d").dtype == np.float64
    assert f.get("d").tolist() == [math.pi, -1e300, 5e-324]
    h = f.get("h")
    assert h.dtype == np.float16 and h.shape == (2, 2)
    # 6e-8 is the nearest half-precision subnormal 2^-24; the others are exact in float16.
    assert h.ravel().tolist() == [0.5, -65504.0, 2.0 ** -24, 1.0009765625]


def test_bf16_is_the_top_half_of_a_float32(tmp_path):
    # bfloat16 bit pattern -> the float32 whose top 16 bits it is.
    known = {0x3FC0: 1.5, 0xC000: -2.0, 0x3E80: 0.25, 0x3F81: 1.0078125, 0x0001: 2.0 ** -133,
             0x7F80: math.inf, 0x0000: 0.0}
    path = write_safetensors(tmp_path / "c.safetensors",
                             {"b": ("BF16", (7,), list(known))})
    b = st.SafetensorsFile(path).get("b")
    assert b.dtype == np.float32
    assert b.tolist() == list(known.values())
    with pytest.raises(TypeError, match="uint16"):
        st.bf16_to_float32(np.zeros(2, np.int32))


def test_arrays_are_memory_mapped_views(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", {"w": ("F32", (4,), [1, 2, 3, 4])})
    w = st.SafetensorsFile(path).get("w")
    base = w
    while base.base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)       # no copy: the bytes come from the mapped file


def test_unaligned_data_and_empty_tensors(tmp_path):
    # A header whose length is not a multiple of 4: the floats start at an odd byte.
    header = {"e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
              "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    assert (8 + len(json.dumps(header))) % 4 != 0          # the data really is unaligned
    path = write_raw(tmp_path / "u.safetensors", header, tensor_bytes("F32", [2.5, -0.5]))
    f = st.SafetensorsFile(path)
    assert f.get("w").tolist() == [2.5, -0.5]
    assert f.get("e").shape == (0, 3)


def test_sharded_checkpoint(tmp_path):
    write_safetensors(tmp_path / "part-1.safetensors", {"a": ("F32", (2,), [1.0, 2.0])})
    write_safetensors(tmp_path / "part-2.safetensors", {"b": ("BF16", (1,), [0x4040])})
    index = tmp_path / st.INDEX_NAME
    index.write_text(json.dumps({"metadata": {"total_size": 10}, "weight_map": {
        "a": "part-1.safetensors", "b": "part-2.safetensors"}}), encoding="utf-8")
    for where in (index, tmp_path):          # the index itself, or its folder
        c = st.open_checkpoint(where)
        assert isinstance(c, st.ShardedCheckpoint)
        assert c.names() == ["a", "b"] and "b" in c and "z" not in c
        assert c.get("a").tolist() == [1.0, 2.0] and c.get("b").tolist() == [3.0]
        assert c.shape("a") == (2,) and c.dtype("b") == "BF16"
    with pytest.raises(st.SafetensorsError, match="missing tensor 'z'"):
        c.get("z")


def test_sharded_checkpoint_errors(tmp_path):
    write_safetensors(tmp_path / "p.safetensors", {"a": ("F32", (1,), [1.0])})
    index = tmp_path / st.INDEX_NAME
    index.write_text(json.dumps({"weight_map": {"a": "p.safetensors", "b": "p.safetensors"}}),
                     encoding="utf-8")
    with pytest.raises(st.SafetensorsError, match="missing tensor 'b'.*index"):
        st.open_checkpoint(index).get("b")           # listed by the index, absent in its shard
    index.write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}), encoding="utf-8")
    with pytest.raises(st.SafetensorsError, match="missing shard: .*gone.safetensors"):
        st.open_checkpoint(index)
    index.write_text(json.dumps({"weights": {}}), encoding="utf-8")
    with pytest.raises(st.SafetensorsError, match="bad index"):
        st.open_checkpoint(index)
    index.write_text("{not json", encoding="utf-8")
    with pytest.raises(st.SafetensorsError, match="bad index: not UTF-8 JSON"):
        st.open_checkpoint(index)


def test_open_checkpoint_finds_the_file(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", {"a": ("F32", (1,), [4.0])})
    assert st.open_checkpoint(tmp_path).get("a").tolist() == [4.0]
    with pytest.raises(FileNotFoundError, match="no such file"):
        st.open_checkpoint(tmp_path / "nothing.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="expected model.safetensors.index.json, .* "
                                                "found none"):
        st.open_checkpoint(tmp_path / "empty")
    two = tmp_path / "two"                    # two files and no index: which one?
    two.mkdir()
    for name in ("x", "y"):
        write_safetensors(two / f"{name}.safetensors", {"a": ("F32", (1,), [1.0])})
    with pytest.raises(FileNotFoundError, match="found \\['x.safetensors', 'y.safetensors'\\]"):
        st.open_checkpoint(two)


# ----- every kind of bad file ------------------------------------------------------------

GOOD = {"a": ("F32", (2,), [1.0, 2.0]), "b": ("F32", (1,), [3.0])}


def _good_bytes(tmp_path):
    return write_safetensors(tmp_path / "good.safetensors", GOOD).read_bytes()


def _header(a_offsets=(0, 8), b_offsets=(8, 12), a_dtype="F32", a_shape=(2,)):
    return {"a": {"dtype": a_dtype, "shape": list(a_shape), "data_offsets": list(a_offsets)},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": list(b_offsets)}}


DATA = tensor_bytes("F32", [1.0, 2.0, 3.0])


def test_truncated_files(tmp_path):
    good = _good_bytes(tmp_path)
    path = tmp_path / "t.safetensors"
    path.write_bytes(good[:5])                               # not even the length field
    with pytest.raises(st.SafetensorsError, match="truncated file: 5 bytes"):
        st.SafetensorsFile(path)
    path.write_bytes(good[:20])                              # the header cut short
    with pytest.raises(st.SafetensorsError, match=r"truncated file: the header needs bytes 8\.\."):
        st.SafetensorsFile(path)
    path.write_bytes(good[:-2])                              # the last tensor cut short
    with pytest.raises(st.SafetensorsError,
                       match=f"truncated file: .*need 12 data bytes, the file holds 10 .*"
                             f"expected {len(good)} bytes"):
        st.SafetensorsFile(path)


@pytest.mark.parametrize("text, message", [
    (b"{not json", "bad header: not UTF-8 JSON"),
    (b"\xff\xfe", "bad header: not UTF-8 JSON"),
    (b"[1, 2]", "bad header: expected a JSON object, got list"),
    (b'[{"a": 1, "a": 2}]', "bad header: the key 'a' appears twice"),
    (b'{"a": {"dtype": "F32", "shape": [1]}}', "should have exactly the keys"),
    (b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', "shape \\[-1\\]"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}', "expected \\[begin, end\\]"),
    (b'{"__metadata__": {"a": 1}}', "__metadata__ must map strings to strings"),
])
def test_bad_headers(tmp_path, text, message):
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + DATA)
    with pytest.raises(st.SafetensorsError, match=message):
        st.SafetensorsFile(path)


def test_a_tensor_name_given_twice_is_refused_and_named(tmp_path):
    # JSON lets a key repeat and json.loads keeps the last: the first tensor would vanish
    # unseen. One line names it; a key repeated inside an entry, and in an index, likewise.
    entry = '{"dtype": "F32", "shape": [1], "data_offsets": [%d, %d]}'
    cases = [('{"w": %s, "w": %s}' % (entry % (0, 4), entry % (4, 8)), "the tensor name 'w'"),
             ('{"w": {"dtype": "F32", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
              "the key 'dtype'")]
    for text, message in cases:
        path = tmp_path / "twice.safetensors"
        path.write_bytes(struct.pack("<Q", len(text)) + text.encode() + tensor_bytes("F32", [1.0, 2.0]))
        with pytest.raises(st.SafetensorsError, match=f"bad header: {message} appears twice") as info:
            st.SafetensorsFile(path)
        assert "\n" not in str(info.value)
    write_safetensors(tmp_path / "s.safetensors", GOOD)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": "s.safetensors", "a": "s.safetensors"}}', encoding="utf-8")
    with pytest.raises(st.SafetensorsError, match="bad index: the tensor name 'a' appears twice"):
        st.ShardedCheckpoint(index)


def test_a_huge_header_length_is_a_bad_header(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))       # another format's first bytes
    with pytest.raises(st.SafetensorsError, match="bad header: its length field says"):
        st.SafetensorsFile(path)


def test_unknown_dtype(tmp_path):
    path = write_raw(tmp_path / "d.safetensors", _header(a_dtype="F12"), DATA)
    with pytest.raises(st.SafetensorsError, match="unknown dtype 'F12' for tensor 'a'"):
        st.SafetensorsFile(path)


def test_known_dtype_this_reader_does_not_read(tmp_path):
    header = {"i": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}
    path = write_raw(tmp_path / "i.safetensors", header, struct.pack("<q", 7))
    f = st.SafetensorsFile(path)                              # the header is fine
    with pytest.raises(st.SafetensorsError, match="dtype I64; this reader reads F64, F32"):
        f.get("i")


@pytest.mark.parametrize("header, message", [
    (_header(a_offsets=(0, 4)), "data_offsets out of range: tensor 'a' has \\[0, 4\\], but its "
                                "dtype F32 and shape \\[2\\] need 8 bytes"),
    (_header(a_offsets=(-8, 0)), "data_offsets out of range: tensor 'a' has \\[-8, 0\\]"),
    (_header(b_offsets=(16, 20)), "data_offsets out of range: tensor 'b' has \\[16, 20\\], "
                                  "the data holds 12 bytes"),
    (_header(b_offsets=(4, 8)), "overlapping data_offsets: tensor 'a' has \\[0, 8\\] and "
                                "tensor 'b' has \\[4, 8\\]"),
])
def test_bad_offsets(tmp_path, header, message):
    path = write_raw(tmp_path / "o.safetensors", header, DATA)
    with pytest.raises(st.SafetensorsError, match=message):
        st.SafetensorsFile(path)


def test_missing_tensor(tmp_path):
    f = st.SafetensorsFile(write_safetensors(tmp_path / "g.safetensors", GOOD))
    with pytest.raises(st.SafetensorsError, match="missing tensor 'c'; the file has 2 tensors "
                                                  "\\(a, b\\)"):
        f.get("c")
    assert isinstance(st.SafetensorsError("x"), ValueError)
