"""pyarrow.flight over TLS, trusting only the node's certificate, with a bearer token given as
basic credentials (authenticate_basic_token): a writer id, a DoPut and a DoGet back.

Usage: pyarrow_flight_tls.py FLIGHT_URL CERT_FILE TOKEN. The table `t` (id int64 not null,
msg utf8) exists. Prints one JSON line; any failed check raises (non-zero exit).
"""

import json
import sys

import pyarrow as pa
import pyarrow.flight as flight


def main():
    url, cert_file, token = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(cert_file, "rb") as f:
        root = f.read()
    client = flight.connect(url, tls_root_certs=root, override_hostname="localhost")
    try:
        client.list_actions()
        raise AssertionError("a call without the token was answered")
    except flight.FlightUnauthenticatedError:
        pass
    header = client.authenticate_basic_token(b"mink", token.encode())
    options = flight.FlightCallOptions(headers=[header])
    (answer,) = list(client.do_action(flight.Action("init_writer", b""), options))
    writer = json.loads(answer.body.to_pybytes())["writer_id"]

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("msg", pa.utf8())])
    batch = pa.record_batch([pa.array([10, 11]), pa.array(["tls", "too"])], schema=schema)
    put, reader = client.do_put(flight.FlightDescriptor.for_path("t", "0"), schema, options)
    put.write_with_metadata(batch, pa.py_buffer(json.dumps({"writer_id": writer, "sequence": 0}).encode()))
    result = json.loads(reader.read().to_pybytes())
    put.close()
    assert (result["base_offset"], result["next_offset"]) == (0, 2), result

    ticket = json.dumps({"v": 1, "table": "t", "bucket": 0}).encode()
    table = client.do_get(flight.Ticket(ticket), options).read_all()
    assert table.column("id").to_pylist() == [10, 11], table
    print(json.dumps({"writer_id": writer, "rows": table.num_rows}))


if __name__ == "__main__":
    main()
