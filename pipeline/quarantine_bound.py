"""The one bound on bad input (``--max-quarantine-rate``), which ``lwm run`` fails on and ``lwm validate`` predicts.

It bounds two shares of the input: quarantined records of the records read, and the bytes of the files of which
nothing was read (no format recognized them, or their reader could not open them) of all the input's bytes. Such
a file is one quarantine row, so by records alone a log of 240 trajectories that no adapter reads would cost as
little as one bad line; by bytes it costs what it holds.
"""

from __future__ import annotations

from typing import Any


def bound_exceeded(counts: dict[str, Any], input_bytes: int, bound: float) -> tuple[str, str] | None:
    """Which share of the input is over `bound` (None when neither is): the start of one line saying so, and the
    count (``records.quarantined`` or ``bytes.unread``) by which to find the worst file. `counts` are the nested
    ingest counts (``records.read``, ``records.quarantined``, ``files.unread``, ``bytes.unread``), `input_bytes`
    the size of every input unit, read or not."""
    records = counts.get("records") or {}
    read, quarantined = int(records.get("read") or 0), int(records.get("quarantined") or 0)
    if read and quarantined / read > bound:
        return (f"quarantine rate {quarantined / read:.1%} ({quarantined} of {read} records) exceeds the bound "
                f"{bound:.1%}", "records.quarantined")
    unread = int((counts.get("bytes") or {}).get("unread") or 0)
    if input_bytes and unread / input_bytes > bound:
        files = int((counts.get("files") or {}).get("unread") or 0)
        return (f"{unread / input_bytes:.1%} of the input ({unread:,} of {input_bytes:,} bytes, in {files} "
                f"file{'s' if files != 1 else ''} of which nothing was read) exceeds the quarantine bound {bound:.1%}",
                "bytes.unread")
    return None


def unread_warning(inputs: list[dict[str, Any]], total: int, shown: int = 3, why: str = "see quarantine/ for why") \
        -> str | None:
    """For input that passed the bound, one ``warning:`` line naming the files of which nothing was read (entries of
    `inputs` with ``unread``, the reason of their quarantine row, as the manifest lists them) and their bytes, of the
    `total` bytes of input; None when there are none."""
    unread = [i for i in inputs if i.get("unread")]
    if not unread:
        return None
    lost = sum(int(i.get("size") or 0) for i in unread)
    sizes = len(unread) > 1  # one file's bytes are the total's
    names = ", ".join(f"{i['uri']} ({i['unread']}" + (f", {int(i.get('size') or 0):,} bytes)" if sizes else ")")
                      for i in unread[:shown])
    more = f" and {len(unread) - shown} more" if len(unread) > shown else ""
    share = f", {lost / total:.1%} of the input" if total else ""
    n = len(unread)
    return (f"warning: nothing was read from {n} input file{'s' if n != 1 else ''} ({lost:,} bytes{share}): "
            f"{names}{more}; {why}")
