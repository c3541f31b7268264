"""Incomplete multipart uploads under a checkpoint location on S3: listed and aborted.

``pyarrow.fs`` writes an object of more than a few MiB to S3 as a multipart upload, which the
stream's close completes.  A process killed while writing (a task whose executor died) leaves
the upload open: S3 keeps and bills its parts, yet no object exists, and ``pyarrow.fs`` can
neither list nor abort it.  This module does both with ``boto3`` when it is importable (the
``s3`` extra), reaching the bucket with the settings of the location's own
``pyarrow.fs.S3FileSystem`` (its keys, or, without keys, the default credential chain, as
``pyarrow`` does; its region, endpoint and scheme).

Where it cannot see -- no ``boto3``, a file system other than S3 (or a ``SubTreeFileSystem``
over one), an assumed role, or a bucket policy refusing the listing -- :func:`incomplete_uploads`
returns None and :func:`abort_uploads` does nothing: everything behaves as without this module,
and the bucket's lifecycle rule (``docs/spark-howto.md``) is what removes the uploads.

Only names under the location's root are listed, and only uploads the caller picked are
aborted; the caller (``commit_protocol``) picks those of attempts that are over.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime

import pyarrow.fs as pafs

from antkv import IOError as AntIOError

_CANNOT_SEE = {"AccessDenied", "NotImplemented", "MethodNotAllowed", "AllAccessDisabled"}


@dataclass(frozen=True)
class Upload:
    """One incomplete multipart upload: the object it was writing (relative to the location's
    root), its id, and when it was started."""

    name: str
    upload_id: str
    initiated: datetime


def _s3_target(location) -> tuple[dict, str, str] | None:
    """``(S3FileSystem settings, bucket, key prefix of the root)``, or None off S3."""
    fs, root = location.fs, location.root.strip("/")
    if isinstance(fs, pafs.SubTreeFileSystem):
        fs, root = fs.base_fs, f"{fs.base_path.strip('/')}/{root}".strip("/")
    if not isinstance(fs, pafs.S3FileSystem):
        return None
    settings = fs.__reduce__()[1][0]  # the constructor's arguments (what pickling carries)
    if settings.get("role_arn"):
        return None  # credentials from an assumed role: pyarrow's to refresh, not ours
    bucket, _, prefix = root.partition("/")
    return settings, bucket, f"{prefix}/" if prefix else ""


@functools.lru_cache(maxsize=8)
def _client(settings_json: str):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    s = json.loads(settings_json)
    endpoint = s.get("endpoint_override") or None
    scheme = s.get("scheme") or "https"
    if endpoint and "://" not in endpoint:
        endpoint = f"{scheme}://{endpoint}"
    config = Config(
        signature_version=UNSIGNED if s.get("anonymous") else None,
        s3={"addressing_style": "virtual" if s.get("force_virtual_addressing") or not endpoint else "path"},
    )
    keys = {}
    if s.get("access_key"):  # else boto3's default chain, as pyarrow's
        keys = dict(aws_access_key_id=s["access_key"], aws_secret_access_key=s.get("secret_key"),
                    aws_session_token=s.get("session_token") or None)
    return boto3.client("s3", region_name=s.get("region") or None, endpoint_url=endpoint,
                        use_ssl=scheme != "http", verify=s.get("tls_ca_file_path") or None,
                        config=config, **keys)


def _reach(location):
    """``(boto3 client, bucket, key prefix of the root)``, or None where this module cannot see."""
    target = _s3_target(location)
    if target is None:
        return None
    try:
        import boto3  # noqa: F401
    except ImportError:
        return None
    settings, bucket, prefix = target
    wanted = ("access_key", "secret_key", "session_token", "anonymous", "region", "scheme",
              "endpoint_override", "force_virtual_addressing", "tls_ca_file_path")
    return _client(json.dumps({k: settings.get(k) for k in wanted}, sort_keys=True)), bucket, prefix


def incomplete_uploads(location, prefix: str) -> list[Upload] | None:
    """The incomplete multipart uploads of objects whose names (relative to ``location``) start
    with ``prefix``, oldest first; None when this module cannot see them (see above).  A local
    file system has none (a local write cut short leaves a temporary file, which cleanup removes)."""
    if type(location.fs) is pafs.LocalFileSystem:
        return []
    reached = _reach(location)
    if reached is None:
        return None
    client, bucket, root = reached
    from botocore.exceptions import BotoCoreError, ClientError

    uploads = []
    try:
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=root + prefix):
            for u in page.get("Uploads", ()):
                uploads.append(Upload(u["Key"][len(root):], u["UploadId"], u["Initiated"]))
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in _CANNOT_SEE:
            return None
        raise AntIOError(f"cannot list the multipart uploads under {location.path(prefix)}: {e}", e,
                         location.path(prefix)) from e
    except BotoCoreError as e:
        raise AntIOError(f"cannot list the multipart uploads under {location.path(prefix)}: {e}", e,
                         location.path(prefix)) from e
    return sorted(uploads, key=lambda u: (u.initiated, u.name))


def abort_uploads(location, uploads) -> int:
    """Abort ``uploads`` (from :func:`incomplete_uploads` of ``location``): their parts are
    freed and they can no longer complete.  One already gone is not an error.  Returns how many
    were aborted."""
    uploads = list(uploads)
    if not uploads:
        return 0
    reached = _reach(location)
    if reached is None:
        return 0
    client, bucket, root = reached
    from botocore.exceptions import BotoCoreError, ClientError

    aborted = 0
    for u in uploads:
        try:
            client.abort_multipart_upload(Bucket=bucket, Key=root + u.name, UploadId=u.upload_id)
            aborted += 1
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchUpload", *_CANNOT_SEE):
                continue
            raise AntIOError(f"cannot abort the upload of {location.path(u.name)}: {e}", e,
                             location.path(u.name)) from e
        except BotoCoreError as e:
            raise AntIOError(f"cannot abort the upload of {location.path(u.name)}: {e}", e,
                             location.path(u.name)) from e
    return aborted
