"""Peak memory of the weighted loss on one long row: full ``[tokens, vocab]`` logits against the chunked loss.

``python -m bench.loss_memory`` measures forward + backward of `training.loss.model_loss_sum` on
one row of 8192 tokens at the Qwen vocabulary (151,936), every target weighted (the worst case),
from final hidden states of width 256 and an output head ``[vocab, 256]``: once through the full
logits (``--loss-chunk-tokens 0``) and once chunked (1024 positions at a time, the default). Each
variant runs in a fresh process; on CPU the figure is the growth of the peak anonymous resident
memory over the inputs already allocated (sampled from /proc every 0.5 ms), on CUDA
``torch.cuda.max_memory_allocated`` over the same baseline. ``--write`` replaces the section "Chunked loss: peak memory" of
bench/RESULTS.md (``python -m bench`` keeps that section when it rewrites the file).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.results import LOSS_HEADING

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = LOSS_HEADING


class AnonymousPeak(threading.Thread):
    """Samples the anonymous resident memory (``RssAnon``: heap and tensors, not the pages of loaded
    libraries, which ``ru_maxrss`` would count) every half millisecond and keeps the largest value."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self._done = 0, threading.Event()

    @staticmethod
    def current() -> int:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.current())
            time.sleep(0.0005)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, self.current())


def measure(tokens: int, vocab: int, hidden: int, chunk: int, device: str, weighted: float) -> dict[str, float]:
    """Peak bytes above the inputs, and seconds, of one forward + backward of the loss (in this process)."""
    import torch

    from training.loss import model_loss_sum

    torch.manual_seed(0)
    # warm-up on a small problem: lazy initialisation (autograd threads, kernels' workspaces) is not the loss's
    small = torch.randn(1, 64, hidden, device=device, requires_grad=True)
    small_head = torch.randn(128, hidden, device=device, requires_grad=True)
    small_labels, small_weights = torch.randint(0, 128, (1, 64), device=device), torch.ones(1, 64, device=device)
    model_loss_sum(small, small_head, None, small_labels, small_weights, chunk).backward()
    states = (torch.randn(1, tokens, hidden, device=device) * 0.5).requires_grad_()
    head = (torch.randn(vocab, hidden, device=device) * 0.02).requires_grad_()
    labels = torch.randint(0, vocab, (1, tokens), device=device)
    weights = (torch.rand(1, tokens, device=device) < weighted).float()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        sampler = AnonymousPeak()
        base = sampler.current()
        sampler.start()
    start = time.perf_counter()
    loss = model_loss_sum(states, head, None, labels, weights, chunk)
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = sampler.stop()
    return {"peak_bytes": float(peak - base), "seconds": time.perf_counter() - start, "loss": float(loss)}


def run_variant(
    tokens: int, vocab: int, hidden: int, chunk: int, device: str, weighted: float, address_space_gib: float = 0
) -> dict[str, float]:
    """`measure` in a fresh interpreter, so one variant's peak cannot hide the other's."""
    args = [sys.executable, "-m", "bench.loss_memory", "--child", str(tokens), str(vocab), str(hidden), str(chunk)]
    args += ["--device", device, "--weighted", str(weighted), "--address-space-gib", str(address_space_gib)]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # glibc otherwise keeps freed blocks of up to 32 MiB in per-thread heaps (the backward pass runs on
    # another thread), which would count memory the loss no longer holds; a fixed threshold maps and
    # unmaps every large tensor, so the resident peak follows the tensors alive at once
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    proc = subprocess.run(args, capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def section(rows: list[tuple[str, dict[str, float]]], tokens: int, vocab: int, hidden: int, device: str) -> str:
    import torch

    gib = 1024**3
    full = rows[0][1]["peak_bytes"]
    lines = [
        HEADING,
        "",
        f"Generated by `python -m bench.loss_memory --write`: one row of {tokens} tokens, vocabulary {vocab}, "
        f"hidden width {hidden}, every target weighted, forward + backward of the weighted loss on {device} "
        f"(torch {torch.__version__}, {os.cpu_count()} cores, {platform.machine()}). Peak memory is the growth "
        "over the inputs (hidden states, head, labels, weights), each variant in a fresh process.",
        "",
        "| loss | peak memory | vs full logits | seconds | loss value |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows:
        lines.append(
            f"| {name} | {row['peak_bytes'] / gib:.2f} GiB | {row['peak_bytes'] / full:.3f}× | "
            f"{row['seconds']:.1f} | {row['loss']:.6g} |"
        )
    lines += [
        "",
        f"One `[{tokens}, {vocab}]` float32 logits tensor is {tokens * vocab * 4 / gib:.2f} GiB; the full-logits "
        "loss holds it, its log-softmax and its gradient. The chunked loss holds one chunk's logits at a time "
        "and recomputes them in the backward pass (one more head matmul per chunk); the values are equal.",
        "",
    ]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md, leaving every other section as it is."""
    current = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    if HEADING in current:
        before, rest = current.split(HEADING, 1)
        following = rest.find("\n## ")
        after = rest[following + 1 :] if following >= 0 else ""
        current = before.rstrip("\n") + "\n\n" + text + ("\n" + after if after else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(current, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, type=int, metavar=("TOKENS", "VOCAB", "HIDDEN", "CHUNK"))
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--weighted", type=float, default=1.0, help="share of targets with weight > 0")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument(
        "--address-space-gib", type=float, default=0, help="cap each variant's address space (CPU; 0: no cap)"
    )
    args = parser.parse_args()
    if args.child:
        if args.address_space_gib:
            # a shared machine: a refused allocation fails this variant instead of waking the OOM killer
            limit = int(args.address_space_gib * 1024**3)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        print(json.dumps(measure(*args.child, args.device, args.weighted)))
        return
    shape = (args.tokens, args.vocab, args.hidden)
    rows = [
        (
            "full logits (`--loss-chunk-tokens 0`)",
            run_variant(*shape, 0, args.device, args.weighted, args.address_space_gib),
        ),
        (
            f"chunked (`--loss-chunk-tokens {args.chunk}`)",
            run_variant(*shape, args.chunk, args.device, args.weighted, args.address_space_gib),
        ),
    ]
    text = section(rows, args.tokens, args.vocab, args.hidden, args.device)
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
