"""A real S3 API on 127.0.0.1 (moto's server mode), for the benches and the tests that need an
object store: ``fs, stop = start_s3_server("bucket")`` gives a ``pyarrow`` S3 file system reaching
it, with the bucket created, and the function that stops the server."""

from __future__ import annotations

import logging


def start_s3_server(bucket: str, front=None):
    """``(pyarrow.fs.S3FileSystem, stop)`` of a new server holding an empty ``bucket``.
    ``front(host, port)``, if given, returns the ``(host, port)`` the file system reaches the
    server through (a proxy in front of it)."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    if front is not None:
        host, port = front(host, port)
    fs = pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", access_key="testing",
                           secret_key="testing", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(bucket)
    return fs, server.stop
