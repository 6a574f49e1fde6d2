"""pyarrow.flight against a Mink node: init_writer, an idempotent DoPut with a retry, a projected
DoGet, a live DoGet that sees a row appended over HTTP (and the heartbeats before it), FlightInfo.

Usage: pyarrow_flight.py FLIGHT_URL HTTP_URL. The table `t` (id int64 not null, msg utf8, two
buckets) exists. Prints one JSON line of what it saw; any failed check raises (non-zero exit).
"""

import json
import sys
import threading
import urllib.request

import pyarrow as pa
import pyarrow.flight as flight


def main():
    flight_url, http_url = sys.argv[1], sys.argv[2]
    client = flight.connect(flight_url)
    seen = {}

    actions = sorted(a.type for a in client.list_actions())
    assert actions == ["init_writer", "offsets", "trim"], actions
    (answer,) = list(client.do_action(flight.Action("init_writer", b"")))
    writer = json.loads(answer.body.to_pybytes())["writer_id"]

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("msg", pa.utf8())])
    batch = pa.record_batch([pa.array([1, 2, 3]), pa.array(["a", None, "c"])], schema=schema)
    descriptor = flight.FlightDescriptor.for_path("t", "0")

    results = []
    for attempt in range(2):
        put, reader = client.do_put(descriptor, schema)
        meta = json.dumps({"writer_id": writer, "sequence": 0}).encode()
        put.write_with_metadata(batch, pa.py_buffer(meta))
        result = json.loads(reader.read().to_pybytes())
        put.close()
        results.append(result)
    first, retry = results
    assert (first["base_offset"], first["next_offset"], first["duplicate"]) == (0, 3, False), first
    assert (retry["base_offset"], retry["duplicate"]) == (0, True), retry
    seen["put"] = results

    ticket = json.dumps({"v": 1, "table": "t", "bucket": 0, "columns": ["msg"]}).encode()
    table = client.do_get(flight.Ticket(ticket)).read_all()
    assert table.column_names == ["msg"], table.column_names
    assert table.column("msg").to_pylist() == ["a", None, "c"], table
    seen["projected_rows"] = table.num_rows

    info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
    assert len(info.endpoints) == 2, info.endpoints
    locations = [str(e.locations[0].uri, "utf8") if isinstance(e.locations[0].uri, bytes)
                 else e.locations[0].uri for e in info.endpoints]
    assert all(loc.endswith(flight_url.split("://")[1]) for loc in locations), locations
    assert info.schema == schema, info.schema
    seen["total_records"] = info.total_records

    # A live DoGet of bucket 1: heartbeats (metadata only) at the empty tail, then the row
    # appended over HTTP.
    live = json.dumps({"v": 1, "table": "t", "bucket": 1, "live": True}).encode()
    stream = client.do_get(flight.Ticket(live))
    beats = []
    chunk = stream.read_chunk()
    while chunk.data is None:
        beats.append(json.loads(chunk.app_metadata.to_pybytes()))
        if len(beats) == 1:
            threading.Thread(target=append_over_http, args=(http_url,)).start()
        chunk = stream.read_chunk()
    assert beats and beats[0] == {"high_watermark": 0, "next_offset": 0}, beats
    assert chunk.data.column(0).to_pylist() == [7], chunk.data
    assert json.loads(chunk.app_metadata.to_pybytes()) == {"base_offset": 0, "next_offset": 1}
    stream.cancel()
    seen["heartbeats"] = len(beats)
    print(json.dumps(seen))


def append_over_http(http_url):
    request = urllib.request.Request(
        f"{http_url}/v1/tables/t/buckets/1/records",
        data=b'{"id": 7, "msg": "live"}\n',
        headers={"content-type": "application/x-ndjson"},
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        assert response.status == 200, response.status


if __name__ == "__main__":
    main()
