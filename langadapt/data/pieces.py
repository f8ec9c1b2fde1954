"""Pieces: the parts of a source that data-stage workers read independently, in a fixed order.

The data stage cleans on every core by giving each worker whole pieces: a file, a run of lines of
a big uncompressed line file (a `Span`, cut at line ends), a run of Parquet row groups, or a
contiguous shard of a `datasets` dataset. The parent takes the pieces' results back in piece
order, so the documents arrive exactly as one process reading the files front to back would see
them, whatever the number of workers (`data.stage`). How a source is cut depends only on its files
and `PIECE_BYTES`, never on the number of workers: the same pieces, the same output.

What cannot be cut: a gzip file (no way into the middle of a deflate stream), a .txt file read by
paragraph or whole, a .json array, a streamed Hub dataset. Such a source uses as many workers as it
has files; corpora at scale come as many files (FineWeb-2, CulturaX and HPLT ship hundreds of
Parquet or .jsonl.zst shards per language).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langadapt.inputs.compression import compression_of
from langadapt.inputs.files import open_input
from langadapt.inputs.text import Span
from langadapt.recipe.data import SourceConfig

PIECE_BYTES = 64 << 20
"""Text a cut piece holds (a span of a line file; Parquet row groups): large enough that a piece's
start-up is noise, small enough that a few per worker keep all cores busy to the end."""
_SCAN_BYTES = 16 << 20


@dataclass(frozen=True)
class Piece:
    """One part of a source: `path` whole, or only its `span` (lines of a plain file), its Parquet
    `row_groups` [first, stop), or shard `shard` of `shards` of a dataset (contiguous rows)."""

    path: Path
    span: Span | None = None
    row_groups: tuple[int, int] | None = None
    shard: tuple[int, int] | None = None  # (index, count)

    def describe(self) -> str:
        """Where the piece is, for logs and errors."""
        if self.span is not None:
            return f"{self.path} from line {self.span.first_line} (byte {self.span.start})"
        if self.row_groups is not None:
            return f"{self.path} row groups {self.row_groups[0]}-{self.row_groups[1] - 1}"
        if self.shard is not None:
            return f"{self.path} shard {self.shard[0] + 1} of {self.shard[1]}"
        return str(self.path)


def plan_pieces(source: SourceConfig, paths: list[Path], fmt_of: object) -> list[Piece]:
    """The pieces of a source's files, in reading order. `fmt_of(source, path)` names a file's
    format (`sources.format_of`)."""
    pieces: list[Piece] = []
    for path in paths:
        fmt = fmt_of(source, path)  # type: ignore[operator]
        if fmt in ("jsonl", "txt") and (fmt == "jsonl" or source.txt_unit == "line"):
            pieces.extend(Piece(path, span=span) for span in line_spans(path))
        elif fmt == "parquet":
            pieces.extend(Piece(path, row_groups=groups) for groups in row_group_runs(path))
        elif fmt == "hf_disk":
            pieces.extend(Piece(path, shard=(i, n)) for n in [_dataset_shards(path)] for i in range(n))
        else:
            pieces.append(Piece(path))
    return pieces


def line_spans(path: Path, piece_bytes: int | None = None) -> list[Span | None]:
    """Spans of about `piece_bytes`, cut after a newline, covering a plain file; [None] (the file
    whole) for a compressed file, a small one, or one that starts with '[' (a JSON array, parsed
    whole). One pass counts the lines before each cut, so errors name the file's own line numbers
    (memchr speed: well under a second per GB)."""
    piece_bytes = piece_bytes or PIECE_BYTES
    try:
        raw = open_input(path, "data")
    except Exception:  # noqa: BLE001 - the reader reports an unreadable file, with its own words
        return [None]
    with raw:
        head = raw.peek(4)[:4]  # type: ignore[attr-defined]
        size = Path(path).stat().st_size
        if compression_of(head) is not None or size <= piece_bytes or head.lstrip()[:1] == b"[":
            return [None]
        spans: list[Span | None] = []
        start, first_line, position, lines, target = 0, 1, 0, 0, piece_bytes
        while block := raw.read(_SCAN_BYTES):
            cut_from = 0
            while position + len(block) > target:
                newline = block.find(b"\n", max(target - position, cut_from))
                if newline < 0:
                    break
                stop = position + newline + 1
                lines += block.count(b"\n", cut_from, newline + 1)
                spans.append(Span(start, stop, first_line))
                start, first_line, cut_from, target = stop, lines + 1, newline + 1, stop + piece_bytes
            lines += block.count(b"\n", cut_from)
            position += len(block)
        if start < position:
            spans.append(Span(start, position, first_line))
    return spans


def row_group_runs(path: Path, piece_bytes: int | None = None) -> list[tuple[int, int] | None]:
    """Runs of consecutive row groups of a Parquet file holding about `piece_bytes` each; [None]
    (the file whole, which also reports an unreadable footer) when the footer cannot be read."""
    piece_bytes = piece_bytes or PIECE_BYTES
    try:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
    except Exception:  # noqa: BLE001 - the reader refuses the file with a located message
        return [None]
    runs: list[tuple[int, int] | None] = []
    first, size = 0, 0
    for group in range(meta.num_row_groups):
        size += meta.row_group(group).total_byte_size
        if size >= piece_bytes:
            runs.append((first, group + 1))
            first, size = group + 1, 0
    if first < meta.num_row_groups:
        runs.append((first, meta.num_row_groups))
    return runs if len(runs) > 1 else [None]


def _dataset_shards(path: Path) -> int:
    """Contiguous shards of a saved dataset: one per arrow file, which `datasets` maps separately."""
    return max(1, len(list(Path(path).glob("**/*.arrow"))))
