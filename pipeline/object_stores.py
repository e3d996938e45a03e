"""Object stores as outputs: which filesystems have buckets, and the one check lwm makes of a bucket."""

from __future__ import annotations

import fsspec

from schemas.errors import ConfigError
from stages.ingest.reading import protocols

# Filesystems whose first path component is a bucket (a container): lwm writes into buckets, never creates one.
BUCKET_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"}


def check_bucket(fs: fsspec.AbstractFileSystem, path: str, shown: str) -> None:
    """An output on S3 whose bucket the store says does not exist is one line now, not a failed write later.
    Only a definite answer counts: an endpoint that does not answer, or credentials that may write objects but
    not look at the bucket, leave the writes to tell (lwm creates no bucket either way: `ensure_dir`)."""
    bucket = path.strip("/").split("/", 1)[0]
    if not bucket or not {"s3", "s3a"} & protocols(fs) or not hasattr(fs, "call_s3"):
        return
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:  # s3fs's translation of NoSuchBucket / 404
        raise ConfigError(f"{shown}: the bucket {bucket} does not exist; lwm writes into a bucket, it does not "
                          "create one") from None
    except Exception:  # no answer, no right to look: not ours to judge here
        return
