"""A PNG of samples: one row per solver (teacher first), the same seeds in every column."""

from pathlib import Path

from PIL import Image, ImageDraw
from torch import Tensor


def save_sample_grid(
    rows: dict[str, Tensor], path: Path, scale: int = 4, label_width: int = 260
) -> Path:
    """`rows` maps a label to uint8 images (N, H, W, C); writes a labelled grid to `path`."""
    first = next(iter(rows.values()))
    n, h, w, _ = first.shape
    pad = 2
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_width = 12 + int(max(measure.textlength(label) for label in rows))
    cell_w, cell_h = w * scale + pad, h * scale + pad
    canvas = Image.new("RGB", (label_width + n * cell_w, len(rows) * cell_h), "white")
    draw = ImageDraw.Draw(canvas)
    for r, (label, images) in enumerate(rows.items()):
        draw.text((4, r * cell_h + cell_h // 2 - 6), label, fill="black")
        for c, image in enumerate(images[:n]):
            array = image.expand(-1, -1, 3) if image.shape[-1] == 1 else image
            tile = Image.fromarray(array.numpy()).resize((w * scale, h * scale), Image.NEAREST)
            canvas.paste(tile, (label_width + c * cell_w, r * cell_h))
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path)
    return path
