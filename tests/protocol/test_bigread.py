"""The sliced reader for big frames must read exactly what kio reads, for every request the broker takes."""

import dataclasses
import io
import struct

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from tierlog.protocol import _bigread
from tierlog.protocol._bigread import read_body
from tierlog.protocol.messages import ApiKey, MalformedRequestError, parse_request
from tierlog.protocol.offload import dismantle

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

_KEYS = {name: key for key, name in api_key_map.items()}


def _types():
    out = []
    for api in sorted(schema_name_map):
        for version in schema_name_map[api]:
            try:
                out.append(load_request_schema(_KEYS[api], version))
            except Exception:
                pass
    return out


TYPES = _types()


def _plain(value):
    """Lists (the sliced reader's big arrays) as tuples, all the way down."""
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _plain(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_sliced_reader_reads_what_kio_reads(data, monkeypatch):
    cls = data.draw(st.sampled_from(TYPES))
    obj = data.draw(st.from_type(cls))
    out = io.BytesIO()
    entity_writer(cls)(out, obj)
    wire = b"pre" + out.getvalue() + b"trailing"
    try:
        expected, size = entity_reader(cls)(wire, 3)
    except ValueError as exc:  # kio cannot read back some extreme timedeltas it wrote
        if "timedelta" not in str(exc):
            raise
        reject()
    monkeypatch.setattr(_bigread, "SLICE", 2)  # slices of two items: every array takes the sliced paths
    got, got_size = read_body(cls, wire, 3)
    assert got_size == size
    assert _plain(got) == expected


def _offset_fetch_frame(partitions: int) -> bytes:
    cls = load_request_schema(ApiKey.OFFSET_FETCH, 9)
    from tierlog.protocol import build, encode_request
    req = build(cls, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                                  "topics": [{"name": "t", "partition_indexes": range(partitions)}]}]})
    return encode_request(req, 7, "c")[4:]


def test_big_int_array_is_read_in_slices_as_a_list():
    frame = _offset_fetch_frame(100_000)
    ctx = parse_request(frame, in_slices=True)
    indexes = ctx.request.groups[0].topics[0].partition_indexes
    assert isinstance(indexes, list) and indexes == list(range(100_000))
    assert _plain(ctx.request) == parse_request(frame).request
    assert ctx.trailing_bytes == 0
    dismantle(ctx.request)
    assert indexes == []


@pytest.mark.parametrize("cut", [1, 5, 1000])
def test_truncated_big_frame_is_malformed(cut):
    frame = _offset_fetch_frame(50_000)
    with pytest.raises(MalformedRequestError):
        parse_request(frame[:-cut], in_slices=True)


def test_bogus_array_length_is_malformed():
    header = struct.pack(">hhih", ApiKey.PRODUCE, 7, 1, -1)
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(MalformedRequestError):
        parse_request(header + body, in_slices=True)
