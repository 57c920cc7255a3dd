"""Image folders: train/<class>/* and test/<class>/*, decoded with Pillow."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from compare.errors import DataError
from compare.experiment.datasets.cache import cached, stat_fingerprint
from compare.experiment.datasets.dataset import IMAGE_SHAPE, Dataset, check_arrays

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def _decode_image(path: Path) -> tuple[np.ndarray | None, str | None]:
    """(image, None), or (None, why) for a file that is not a readable image."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as img:
            img.load()
            resized = img.size != IMAGE_SHAPE[1::-1]
            rgb = img.convert("RGB")  # grayscale, palette and RGBA become RGB
            if resized:
                rgb = rgb.resize(IMAGE_SHAPE[1::-1], Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8), ("resized" if resized else None)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        return None, f"unreadable ({exc.__class__.__name__})"


def _list_split(root: Path, classes: tuple[str, ...] | None
                ) -> tuple[tuple[str, ...], list[tuple[Path, int]]]:
    """The class names and (file, label) pairs of one split folder."""
    found = tuple(sorted(d.name for d in root.iterdir()
                         if d.is_dir() and not d.name.startswith(".")))
    if classes is None:
        classes = found
    unknown = set(found) - set(classes)
    if unknown:
        raise DataError(f"{root} has classes not in train/: {', '.join(sorted(unknown))}")
    files: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        folder = root / name
        entries = sorted(p for p in folder.iterdir()
                         if p.is_file() and not p.name.startswith(".")) if folder.is_dir() else []
        if not entries and root.name == "train":
            raise DataError(f"class folder {folder} is empty: every class needs training images "
                            f"(remove the folder to drop the class)")
        files.extend((p, label) for p in entries)
    return classes, files


def _decode_split(files: list[tuple[Path, int]], notes: list[str], what: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Decode a split's files in threads; skipped and resized files go into `notes`."""
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        decoded = list(pool.map(lambda item: _decode_image(item[0]), files, chunksize=256))
    images, labels, skipped, resized = [], [], [], 0
    for (path, label), (image, why) in zip(files, decoded):
        if image is None:
            skipped.append(path.name)
            continue
        resized += why == "resized"
        images.append(image)
        labels.append(label)
    if skipped:
        notes.append(f"{what}: skipped {len(skipped)} file(s) that are not readable images "
                     f"(e.g. {', '.join(skipped[:3])})")
    if resized:
        notes.append(f"{what}: resized {resized} image(s) to 32x32")
    if not images:
        raise DataError(f"{what}: no readable images")
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def load_folder(data_dir: str, seed: int = 0, validation_fraction: float = 0.1) -> Dataset:
    """train/<class>/* and test/<class>/* images (PNG/JPEG...); no test/: a seeded split.

    Non-image or broken files are skipped and counted in the dataset's notes; images of
    other sizes are resized to 32x32; grayscale/RGBA become RGB.

    Args:
        data_dir: the folder holding train/ (and optionally test/).
        seed: picks the held-out images when there is no test/.
        validation_fraction: share of train/ held out as the test set when there is no test/.
    """
    root = Path(data_dir)
    train_root, test_root = root / "train", root / "test"
    if not train_root.is_dir():
        raise DataError(f"{root} has no train/ folder: expected train/<class>/*.png|jpg "
                        f"(and optionally test/<class>/)")
    classes, train_files = _list_split(train_root, None)
    if not classes:
        raise DataError(f"{train_root} has no class folders")
    test_files = _list_split(test_root, classes)[1] if test_root.is_dir() else []
    all_paths = [p for p, _ in train_files + test_files]
    fingerprint = stat_fingerprint(all_paths) + f":{seed}:{validation_fraction}"

    def build() -> Dataset:
        notes: list[str] = []
        train_x, train_y = _decode_split(train_files, notes, "train")
        if test_files:
            test_x, test_y = _decode_split(test_files, notes, "test")
        else:
            order = np.random.default_rng(seed).permutation(len(train_y))
            n_val = max(1, int(round(validation_fraction * len(order))))
            val, keep = np.sort(order[:n_val]), np.sort(order[n_val:])
            test_x, test_y = train_x[val], train_y[val]
            train_x, train_y = train_x[keep], train_y[keep]
            notes.append(f"no test/ folder: held out {n_val} training images (seed {seed}) "
                         f"as the test set")
        check_arrays(train_x, train_y, len(classes), f"{root} (train)")
        check_arrays(test_x, test_y, len(classes), f"{root} (test)")
        return Dataset(train_x, train_y, test_x, test_y, classes, "folder", str(root),
                       notes=notes)

    return cached("folder", fingerprint, build)
