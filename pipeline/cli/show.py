"""``lwm show``: one sample decoded, each token colored by its loss weight."""

from __future__ import annotations

import os
import posixpath
import sys

import click

from pipeline.errors import handle_errors
from schemas.errors import ConfigError
from schemas.text import on_terminal


def _color(weight: float) -> str:
    if weight <= 0:
        return "\x1b[90m"  # grey: no loss
    if weight < 0.25:
        return "\x1b[34m"
    if weight < 0.75:
        return "\x1b[33m"
    return "\x1b[32m"


def find_sample(run_dir: str, sample: str | None, index: int | None, pool: str | None) -> dict:
    """The shard row with sample id `sample`, or at row `index` over the shards in shard order.

    Each shard file is opened, read and closed here, on this thread: only the ``sample_id``
    column is scanned, a row count comes from the footer, and one row is read in the end. (Whole
    tables read from unclosed Python file objects let pyarrow's I/O threads outlive the
    interpreter at exit, which aborted a failed lookup with SIGABRT now and then.)
    """
    import pyarrow.parquet as pq

    from pipeline.outputs import out_fs

    if index is not None and index < 0:
        raise ConfigError(f"--index must be 0 or more, got {index}")
    if index is not None and sample is not None:
        raise ConfigError("give --sample ID or --index N, not both")
    fs, base = out_fs(run_dir)
    shards = posixpath.join(base, "shards")
    files = sorted(p for p in fs.find(shards) if p.endswith(".parquet")) if fs.exists(shards) else []
    if pool:
        files = [p for p in files if f"/shards/{pool}/" in p]
    seen = 0
    want = index or 0
    for path in files:
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f, pre_buffer=False)
            if sample is not None:
                ids = pf.read(columns=["sample_id"], use_threads=False).column("sample_id").to_pylist()
                if sample in ids:
                    return _row(pf, ids.index(sample))
                continue
            rows = pf.metadata.num_rows
            if want < seen + rows:
                return _row(pf, want - seen)
            seen += rows
    where = f"the {pool} pool of {run_dir}" if pool else run_dir
    if not files:
        raise ConfigError(f"{where} holds no samples" + (" (no shard files)" if pool else ""))
    if sample is not None:
        raise ConfigError(f"no sample id {sample} in {where}")
    raise ConfigError(f"no sample at index {want} in {where}, which holds {seen} (indexes 0 to {seen - 1})"
                      if seen else f"{where} holds no samples")


def _row(pf, i: int) -> dict:
    """Row `i` of an open ParquetFile, reading only its row group."""
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if i < n:
            return pf.read_row_group(g, use_threads=False).slice(i, 1).to_pylist()[0]
        i -= n
    raise IndexError(i)


DATA_OPEN, DATA_CLOSE = "⟪", "⟫"


def _special_ids(tok) -> dict[int, str]:
    """Id → text of the special tokens the vocabulary has (only these can come from the renderer)."""
    vocab = getattr(tok, "vocab", None)
    if vocab is not None:
        return {i: t for t, i in vocab.special_tokens.items()}
    return {i: t for t, i in getattr(tok, "_added", {}).items()}


def _spelled_specials(texts: list[str], specials: set[str]) -> set[int]:
    """Indices of the tokens that help spell a special-token string as ordinary text."""
    joined = "".join(texts)
    starts, pos = [], 0
    for text in texts:
        starts.append(pos)
        pos += len(text)
    marked: set[int] = set()
    for special in specials:
        at = joined.find(special)
        while at >= 0:
            end = at + len(special)
            marked.update(i for i, s in enumerate(starts) if s < end and s + len(texts[i]) > at)
            at = joined.find(special, end)
    return marked


def token_texts(tok, ids: list[int]) -> list[str]:
    """Each token's text, where a character whose UTF-8 bytes are split over up to four tokens is shown whole on
    the first of them (the others show nothing) instead of as replacement characters."""
    texts = [tok.decode([i]) for i in ids]
    k = 0
    while k < len(ids):
        if "\ufffd" in texts[k]:
            for j in range(2, min(4, len(ids) - k) + 1):  # the fewest tokens that complete the character
                joined = tok.decode(ids[k:k + j])
                fewer = joined.count("\ufffd") < sum(t.count("\ufffd") for t in texts[k:k + j])
                if fewer and not joined.endswith("\ufffd"):
                    texts[k:k + j] = [joined] + [""] * (j - 1)
                    k += j - 1
                    break
        k += 1
    return texts


def render_sample(row: dict, tok, plain: bool) -> str:
    """Tokens with weights: ANSI colors, or `plain` marks ``⟦w=0.05⟧…`` where the weight changes.

    Tokens that spell a special-token string as ordinary text (data such as a logged ``<|im_end|>``)
    are shown between ``⟪`` and ``⟫``, so they never look like the renderer's real special tokens.
    """
    return _render(row, tok, plain)[0]


def _render(row: dict, tok, plain: bool) -> tuple[str, bool]:
    """`render_sample`'s text, and whether the data spells a special-token string in it. Control characters of the
    data (terminal escapes, carriage returns) are shown as escapes (`schemas.text.on_terminal`): they must neither
    act on the terminal nor vanish from what is shown."""
    specials = _special_ids(tok)
    if "input_ids" not in row:
        ids = row["prompt_ids"]
        texts = token_texts(tok, ids)
        marked = _spelled_specials([t if i not in specials else "\0" for i, t in zip(ids, texts)], set(specials.values()))
        texts = [on_terminal(t) for t in texts]
        shown = "".join(_wrap(texts, k, marked) for k in range(len(ids)))
        return shown + "\n--- reference ---\n" + on_terminal(row["reference"]), bool(marked)
    ids, weights = row["input_ids"], row["loss_weight"]
    texts = token_texts(tok, ids)
    # a real special token never joins a spelled one: blank it out before searching
    marked = _spelled_specials([t if i not in specials else "\0" for i, t in zip(ids, texts)], set(specials.values()))
    texts = [on_terminal(t) for t in texts]
    out, current = [], None
    for k, w in enumerate(weights):
        text = _wrap(texts, k, marked)
        if plain:
            if w != current:
                out.append(f"⟦w={w:g}⟧")
                current = w
            out.append(text)
        else:
            out.append(_color(w) + text)
    if not plain:
        out.append("\x1b[0m")
    return "".join(out), bool(marked)


def _wrap(texts: list[str], k: int, marked: set[int]) -> str:
    text = texts[k]
    if k in marked and k - 1 not in marked:
        text = DATA_OPEN + text
    if k in marked and k + 1 not in marked:
        text += DATA_CLOSE
    return text


@click.command("show")
@click.argument("run_dir")
@click.option("--sample", help="Sample id.")
@click.option("--index", type=int, help="Row index over the shards (in shard order).")
@click.option("--pool", type=click.Choice(["cpt", "sft", "rl", "eval"]), help="Only this pool's shards.")
@click.option("--plain", is_flag=True, help="Mark weights in text instead of colors (the default where stdout is no "
              "terminal, or NO_COLOR is set).")
@click.option("--color", "color", is_flag=True, help="Colors even where stdout is no terminal.")
@handle_errors
def show_cmd(run_dir: str, sample: str | None, index: int | None, pool: str | None, plain: bool, color: bool) -> None:
    """One sample decoded, each token colored by its weight, with per-turn categories."""
    if plain and color:
        raise ConfigError("give --plain or --color, not both")
    plain = plain or not (color or (sys.stdout.isatty() and not os.environ.get("NO_COLOR")))
    from pipeline.cli.run_files import finished_manifest
    from stages.tokenizer import load_tokenizer

    manifest = finished_manifest(run_dir)[2]
    cfg = manifest["config"]["tokenizer"]
    row = find_sample(run_dir, sample, index, pool)  # first: a lookup that fails need not load the tokenizer
    tok = load_tokenizer(cfg["spec"], cfg["engine"] or None)
    click.echo(f"sample {row['sample_id']}  traj {row['traj_id']}  {row['domain']}/{row['pool']}  "
               f"template {row['template']}  turn {row['turn_idx']}/{row['total_turns']}")
    cats = ", ".join(f"{i + 1}:{c}({k:g})" for i, (c, k) in enumerate(zip(row["turn_category"], row["turn_keep"])))
    click.echo(f"observations: {cats}")
    if not plain:
        click.echo("legend: \x1b[90mgrey w=0\x1b[0m \x1b[34mblue w<0.25\x1b[0m \x1b[33myellow w<0.75\x1b[0m "
                   "\x1b[32mgreen w≥0.75\x1b[0m", color=True)
    shown, spelled = _render(row, tok, plain)
    if spelled:
        click.echo(f"{DATA_OPEN}…{DATA_CLOSE}: a special-token string in the data, encoded as ordinary text")
    click.echo(shown, color=not plain)

